#include "engine/startup/memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "device/cuda_seam.hpp"
#include "device/host_alloc_probe.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "engine/optim/optim.hpp"
#include "engine/step/train_step.hpp"

namespace trainer::engine {

ProbeModel build_probe_model(const config::RunConfig& cfg, const torch::Device& device) {
  ProbeModel p;
  models::BuildContext ctx;
  if (cfg.dist.tensor_parallel > 1) {
    p.comm = std::make_unique<tensor_parallel::StandInCommunicator>(0, cfg.dist.tensor_parallel);
    ctx.tp = p.comm.get();
    ctx.sequence_parallel = cfg.dist.sequence_parallel;
  }
  p.model = models::build_model_on(cfg.model, device, ctx);
  return p;
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
      auto& counter = device::HostAllocProbe::instance();
      device::HostAllocProbe::Scope installed;
      const int64_t before = counter.live();
      counter.reset_peak();
      run();
      peak = static_cast<double>(counter.peak() - before);
    }
    clear_grads();
    return peak;
  };
  r.how = device.is_cuda() ? "CUDA caching allocator" : "CPU counting allocator";
  r.peak1 = measure(b1);
  auto t0 = std::chrono::steady_clock::now();
  r.peak2 = b2 == b1 ? r.peak1 : measure(b2);
  double last_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // larger points fit larger batches better: keep doubling while a probe step is cheap (under half a
  // second), and in any case while the spike still hides the activations
  while (b2 > b1 && 2 * r.b2 <= max_b2 && (last_s < 0.5 || r.peak2 - r.peak1 < 0.25 * r.peak1)) {
    r.b1 = r.b2;
    r.peak1 = r.peak2;
    r.b2 *= 2;
    t0 = std::chrono::steady_clock::now();
    r.peak2 = measure(r.b2);
    last_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

MemoryBudget memory_budget(double configured_gb, const std::string& configured_what, const torch::Device& device,
                           int64_t local_world_size) {
  MemoryBudget b;
  if (configured_gb > 0) return {configured_gb * 1e9, configured_what};
  if (device.is_cuda()) {
    const auto devs = device::cuda_devices();
    const int index = device.has_index() ? device.index() : 0;
    if (index < static_cast<int>(devs.size())) b.bytes = 0.9 * static_cast<double>(devs[index].total_memory);
    b.source = "90 % of the GPU's memory";
  } else if (auto avail = available_host_memory()) {
    b.bytes = 0.8 * *avail / static_cast<double>(std::max<int64_t>(local_world_size, 1));
    b.source = fmt::format("80 % of the host's available memory / {} local rank(s)", local_world_size);
  }
  return b;
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
