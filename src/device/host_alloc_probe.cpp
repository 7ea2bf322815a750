#include "device/host_alloc_probe.hpp"

#include <c10/core/CPUAllocator.h>

#include <cstring>

namespace trainer::device {

HostAllocProbe& HostAllocProbe::instance() {
  static auto* probe = new HostAllocProbe();
  return *probe;
}

HostAllocProbe::Scope::Scope() : previous_(c10::GetCPUAllocator()) {
  auto& p = instance();
  if (previous_ != &p) p.base_ = previous_;
  c10::SetCPUAllocator(&p, /*priority=*/255);
}

HostAllocProbe::Scope::~Scope() { c10::SetCPUAllocator(previous_, /*priority=*/255); }

c10::DataPtr HostAllocProbe::allocate(size_t n) {
  c10::DataPtr inner = base_->allocate(n);
  void* data = inner.get();
  if (n == 0 || data == nullptr) return inner;  // nothing to count
  const auto bytes = static_cast<int64_t>(n);
  const auto device = inner.device();
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.emplace(data, Block{std::move(inner), bytes});
  }
  const int64_t now = live_.fetch_add(bytes) + bytes;
  int64_t seen = peak_.load();
  while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
  }
  return {data, data, &HostAllocProbe::release, device};
}

c10::DeleterFnPtr HostAllocProbe::raw_deleter() const { return &HostAllocProbe::release; }

void HostAllocProbe::copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

void HostAllocProbe::release(void* data) {
  auto& self = instance();
  c10::DataPtr inner;  // freed through the wrapped allocator when it goes out of scope, outside the lock
  std::lock_guard<std::mutex> lock(self.mu_);
  auto it = self.blocks_.find(data);
  if (it == self.blocks_.end()) return;
  self.live_.fetch_sub(it->second.bytes);
  inner = std::move(it->second.inner);
  self.blocks_.erase(it);
}

}  // namespace trainer::device
