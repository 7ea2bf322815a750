#include "engine/memory_plan.hpp"

#include <c10/core/CPUAllocator.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "device/cuda_seam.hpp"
#include "engine/loss_scaler.hpp"
#include "engine/optim.hpp"
#include "engine/train_step.hpp"

namespace trainer::engine {
namespace {

// Wraps the CPU allocator while a probe runs and counts the bytes its tensors hold: live and the
// high-water mark. The context of each block is its data pointer (some ATen code frees through
// raw_deleter(), which needs that); the inner allocation is kept in a table until then. Tensors
// allocated through it may outlive the probe: the allocator is never destroyed.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  static CountingCpuAllocator& get() {
    static auto* a = new CountingCpuAllocator();
    return *a;
  }
  void install() {
    inner_ = c10::GetCPUAllocator();
    c10::SetCPUAllocator(this, /*priority=*/255);
  }
  void uninstall() { c10::SetCPUAllocator(inner_, /*priority=*/255); }
  void reset_peak() { peak_.store(live_.load()); }
  int64_t live() const { return live_.load(); }
  int64_t peak() const { return peak_.load(); }

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    if (n == 0 || data == nullptr) return inner;  // nothing to count
    const auto bytes = static_cast<int64_t>(n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_.emplace(data, Held{std::move(inner), bytes});
    }
    const int64_t now = live_.fetch_add(bytes) + bytes;
    int64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
    return {data, data, &CountingCpuAllocator::release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
  };
  static void release(void* data) {
    auto& self = get();
    c10::DataPtr inner;  // freed outside the lock
    {
      std::lock_guard<std::mutex> lock(self.mu_);
      auto it = self.held_.find(data);
      if (it == self.held_.end()) return;
      self.live_.fetch_sub(it->second.bytes);
      inner = std::move(it->second.inner);
      self.held_.erase(it);
    }
  }
  c10::Allocator* inner_ = nullptr;
  std::mutex mu_;
  std::unordered_map<void*, Held> held_;
  std::atomic<int64_t> live_{0}, peak_{0};
};

int64_t tensor_bytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

}  // namespace

FixedMemory fixed_memory(const models::Model& model, const config::OptimConfig& optim, int64_t world_size) {
  FixedMemory m;
  for (const auto& p : unique_parameters(model)) m.parameters += tensor_bytes(p);
  m.gradients = m.parameters;
  if (optim.name == "adamw") m.optimizer = 2 * m.parameters;
  else if (optim.momentum != 0) m.optimizer = m.parameters;
  if (world_size > 1) m.ddp_buckets = m.gradients;
  return m;
}

ActivationProbe probe_activations(models::Model& model, const std::vector<int64_t>& sample_shape,
                                  int64_t vocab_or_classes, Precision precision, const torch::Device& device,
                                  bool channels_last, int64_t b1, int64_t b2, int64_t max_b2) {
  ActivationProbe r;
  r.b1 = b1;
  r.b2 = b2;
  const bool tokens = model.input_kind() == models::InputKind::Tokens;
  LossScalerConfig sc;
  sc.enabled = false;
  LossScaler scaler(sc, device);
  model.train();
  auto clear_grads = [&] {
    for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  };
  auto measure = [&](int64_t b) -> double {
    clear_grads();
    std::vector<int64_t> shape = {b};
    shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
    auto run = [&] {
      torch::Tensor input, target;
      if (tokens) {
        input = torch::randint(0, vocab_or_classes, shape, torch::TensorOptions().dtype(torch::kLong).device(device));
        target = torch::randint(0, vocab_or_classes, shape, torch::TensorOptions().dtype(torch::kLong).device(device));
      } else {
        input = torch::randn(shape, torch::TensorOptions().device(device));
        if (channels_last) input = input.contiguous(at::MemoryFormat::ChannelsLast);
        target = torch::randint(0, vocab_or_classes, {b}, torch::TensorOptions().dtype(torch::kLong).device(device));
      }
      forward_backward(model, input, target, 1, precision, device, scaler);
    };
    double peak = 0;
    if (device.is_cuda()) {
      const int index = device.has_index() ? device.index() : 0;
      const int64_t before = device::cuda_memory_stats(index).allocated;
      device::cuda_reset_peak_memory(index);
      run();
      peak = static_cast<double>(device::cuda_memory_stats(index).peak_allocated - before);
    } else {
      auto& counter = CountingCpuAllocator::get();
      counter.install();
      const int64_t before = counter.live();
      counter.reset_peak();
      try {
        run();
      } catch (...) {
        counter.uninstall();
        throw;
      }
      peak = static_cast<double>(counter.peak() - before);
      counter.uninstall();
    }
    clear_grads();
    return peak;
  };
  r.how = device.is_cuda() ? "CUDA caching allocator" : "CPU counting allocator";
  r.peak1 = measure(b1);
  r.peak2 = b2 == b1 ? r.peak1 : measure(b2);
  while (b2 > b1 && 2 * r.b2 <= max_b2 && r.peak2 - r.peak1 < 0.25 * r.peak1) {
    r.b1 = r.b2;
    r.peak1 = r.peak2;
    r.b2 *= 2;
    r.peak2 = measure(r.b2);
  }
  return r;
}

std::vector<int64_t> micro_batch_candidates(int64_t per_rank) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d * d <= per_rank; ++d)
    if (per_rank % d == 0) {
      out.push_back(d);
      if (d != per_rank / d) out.push_back(per_rank / d);
    }
  std::sort(out.rbegin(), out.rend());
  return out;
}

int64_t largest_fitting(const FixedMemory& fixed, const ActivationProbe& probe, double budget_bytes,
                        const std::vector<int64_t>& candidates) {
  for (int64_t b : candidates)
    if (static_cast<double>(fixed.total()) + probe.at(b) <= budget_bytes) return b;
  return 0;
}

int64_t search_fitting(const std::vector<int64_t>& candidates, int64_t start, const std::function<bool(int64_t)>& fits) {
  for (int64_t b : candidates) {
    if (b > start) continue;
    if (fits(b)) return b;
  }
  return 0;
}

std::optional<double> available_host_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  double value = 0;
  while (f >> key >> value >> unit)
    if (key == "MemAvailable:") return value * 1024.0;  // kB
  return std::nullopt;
}

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

}  // namespace trainer::engine
