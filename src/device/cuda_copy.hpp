// Host-to-device copies on a side stream, for the data loader: a worker thread copies each pinned
// batch to the GPU on its own stream as soon as it is built, so the copy overlaps the step running
// on the training stream; the training stream waits for it only when it takes the batch. A
// CPU-only LibTorch links the stubs of cuda_copy_nocuda.cpp (no copies are ever asked for there).
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

namespace trainer::device {

// The completion of one batch's copies (a CUDA event on the copying thread's stream).
class CopyFence {
 public:
  virtual ~CopyFence() = default;
};

// Copies each of `host` (pinned CPU tensors) to CUDA device `device` on the calling thread's copy
// stream, without waiting; returns the device tensors in order and sets `fence` to their completion.
// `then` (may be empty) runs on that stream after the copies and before the fence, on the device
// tensors, which it may replace: the loader's uint8 -> float normalisation of a raw image batch.
std::vector<torch::Tensor> copy_to_device_async(const std::vector<torch::Tensor>& host, int device,
                                                std::shared_ptr<CopyFence>& fence,
                                                const std::function<void(std::vector<torch::Tensor>&)>& then = {});

// Makes the current stream wait for `fence` and tells the caching allocator that `tensors` are used
// on it (so their memory is not reused by the copy stream while the step still reads them).
void wait_for_copy(const CopyFence& fence, const std::vector<torch::Tensor>& tensors);

}  // namespace trainer::device
