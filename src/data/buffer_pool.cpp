#include "data/buffer_pool.hpp"

#include <cstdlib>
#include <new>

namespace trainer::data {

BufferPool::BufferPool(size_t keep) : shared_(std::make_shared<Shared>()) { shared_->keep = keep; }

BufferPool::Shared::~Shared() {
  for (auto& [bytes, p] : free) std::free(p);
}

torch::Tensor BufferPool::empty(const std::vector<int64_t>& sizes, torch::ScalarType dtype) {
  size_t bytes = torch::elementSize(dtype);
  for (auto s : sizes) bytes *= static_cast<size_t>(s);
  bytes = std::max<size_t>(64, (bytes + 63) / 64 * 64);  // aligned_alloc wants a multiple of the alignment
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    auto& f = shared_->free;
    for (size_t i = 0; i < f.size(); ++i)
      if (f[i].first == bytes) {
        p = f[i].second;
        f.erase(f.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
  }
  if (!p) p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  std::weak_ptr<Shared> pool = shared_;
  auto give_back = [pool, bytes](void* q) {
    if (auto s = pool.lock()) {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->free.size() < s->keep) {
        s->free.emplace_back(bytes, q);
        return;
      }
    }
    std::free(q);
  };
  return torch::from_blob(p, sizes, give_back, torch::TensorOptions().dtype(dtype));
}

size_t BufferPool::kept() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->free.size();
}

}  // namespace trainer::data
