// Host memory for the loader's batches, kept and handed out again. A fresh batch tensor of images
// (64 x 3 x 224 x 224 float: 38.5 MB, above malloc's largest mmap threshold) is mapped anew each
// time: ten thousand page faults and the kernel zeroing every page, 20-55 ms a batch on the 2-core
// host against 2.5-5 ms to refill a kept one (docs/PERFORMANCE.md, "Input pipeline").
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace trainer::data {

class BufferPool {
 public:
  // `keep`: freed buffers held for reuse at most (more are given back to the system).
  explicit BufferPool(size_t keep = 16);
  // An uninitialised CPU tensor whose memory returns to the pool when its last user lets it go (the
  // pool may be gone by then: the buffer is freed instead). Thread-safe: one lock per batch, not per
  // sample.
  torch::Tensor empty(const std::vector<int64_t>& sizes, torch::ScalarType dtype);
  size_t kept() const;  // buffers held for reuse now

 private:
  struct Shared {
    std::mutex mu;
    std::vector<std::pair<size_t, void*>> free;  // (bytes, buffer)
    size_t keep = 16;
    ~Shared();
  };
  std::shared_ptr<Shared> shared_;
};

}  // namespace trainer::data
