// CUDA LibTorch: copies on a per-thread stream from ATen's pool, completion as a CUDA event.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>

#include "device/cuda_copy.hpp"

namespace trainer::device {
namespace {

class EventFence : public CopyFence {
 public:
  mutable at::cuda::CUDAEvent event;  // block() is not const
};

// The calling thread's copy stream on `device` (one per loader thread and device). From ATen's
// high-priority pool: never one of the low-priority streams that the training loop (CudaSideStream,
// which a CUDA graph captures) or NCCL take, so a copy can never land inside a capture; and a copy
// that gates the next step goes first.
c10::cuda::CUDAStream copy_stream(c10::DeviceIndex device) {
  thread_local std::optional<c10::cuda::CUDAStream> stream;
  if (!stream || stream->device_index() != device) stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device);
  return *stream;
}

}  // namespace

std::vector<torch::Tensor> copy_to_device_async(const std::vector<torch::Tensor>& host, int device,
                                                std::shared_ptr<CopyFence>& fence,
                                                const std::function<void(std::vector<torch::Tensor>&)>& then) {
  const auto index = static_cast<c10::DeviceIndex>(device);
  auto stream = copy_stream(index);
  c10::cuda::CUDAStreamGuard guard(stream);
  std::vector<torch::Tensor> out;
  for (const auto& t : host) out.push_back(t.to(torch::Device(torch::kCUDA, index), /*non_blocking=*/true));
  if (then) then(out);  // kernels on the copy stream: ordered after the copies, before the event
  auto f = std::make_shared<EventFence>();
  f->event.record(stream);
  fence = f;
  return out;
}

void wait_for_copy(const CopyFence& fence, const std::vector<torch::Tensor>& tensors) {
  const auto& f = static_cast<const EventFence&>(fence);
  for (const auto& t : tensors) {
    if (!t.defined() || !t.is_cuda()) continue;
    auto current = c10::cuda::getCurrentCUDAStream(t.device().index());
    f.event.block(current);
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), current);
  }
}

}  // namespace trainer::device
