#include "device/host_alloc_probe.hpp"

#include <c10/core/CPUAllocator.h>

#include "device/cuda_seam.hpp"

#include <algorithm>
#include <cstring>

namespace trainer::device {

HostAllocProbe& HostAllocProbe::instance() {
  static auto* probe = new HostAllocProbe();
  return *probe;
}

namespace {
thread_local bool t_counted = false;  // this thread's allocations count while the probe is filtered
}  // namespace

HostAllocProbe::Scope::Scope(bool this_thread_only) : previous_(c10::GetCPUAllocator()), filtered_(this_thread_only) {
  auto& p = instance();
  if (previous_ != &p) p.base_ = previous_;
  if (filtered_) {
    t_counted = true;
    p.filtered_.store(true);
  }
  c10::SetCPUAllocator(&p, /*priority=*/255);
}

HostAllocProbe::Scope::~Scope() {
  c10::SetCPUAllocator(previous_, /*priority=*/255);
  if (filtered_) {
    instance().filtered_.store(false);
    t_counted = false;
  }
}

c10::DataPtr HostAllocProbe::allocate(size_t n) {
  c10::DataPtr inner = base_->allocate(n);
  void* data = inner.get();
  if (n == 0 || data == nullptr) return inner;  // nothing to count
  if (filtered_.load(std::memory_order_relaxed) && !t_counted) return inner;  // another thread's: not counted
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

HeldBytesMeter::HeldBytesMeter(const c10::Device& device) : device_(device) {
  if (!device_.is_cuda()) scope_.emplace(/*this_thread_only=*/true);
  base_ = held();
}

int64_t HeldBytesMeter::held() const {
  if (device_.is_cuda()) return cuda_memory_stats(device_.has_index() ? device_.index() : 0).allocated;
  return HostAllocProbe::instance().live();
}

void HeldBytesMeter::sample() { peak_ = std::max(peak_, held() - base_); }

}  // namespace trainer::device
