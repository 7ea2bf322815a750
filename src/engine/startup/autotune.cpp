#include "engine/startup/autotune.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace trainer::engine {

std::pair<double, double> time_attention(const models::AttentionProbe& probe, int64_t batch, Precision precision,
                                         const torch::Device& device, int reps) {
  const auto dtype = precision == Precision::Bf16 ? torch::kBFloat16
                     : precision == Precision::Fp16 ? torch::kHalf
                                                    : torch::kFloat32;
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  auto make = [&] { return torch::randn({batch, probe.heads, probe.seq, probe.head_size}, opts).requires_grad_(true); };
  auto q = make(), k = make(), v = make();
  auto once = [&](bool math) {
    const auto t0 = std::chrono::steady_clock::now();
    {
      AutocastScope autocast(precision, device);
      auto y = probe.run(q, k, v, math);
      y.backward(torch::ones_like(y));
    }
    if (device.is_cuda()) torch::cuda::synchronize();
    q.mutable_grad() = k.mutable_grad() = v.mutable_grad() = torch::Tensor();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  once(false), once(true);  // warm-up: first calls allocate and pick kernels
  std::vector<double> sdpa, math;
  for (int r = 0; r < reps; ++r) {  // alternating, so drift in machine load hits both
    sdpa.push_back(once(false));
    math.push_back(once(true));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(sdpa), median(math)};
}

AttentionChoice choose_attention(const models::AttentionProbe& probe, int64_t batch, Precision precision,
                                 const torch::Device& device, bool deterministic) {
  AttentionChoice c;
  c.attention = config::Attention::Sdpa;
  if (deterministic) {
    c.reason = "run.deterministic: not timed";
    return c;
  }
  if (!device.is_cpu()) {
    c.reason = "on " + device.str() + " SDPA's fused kernels are taken without timing";
    return c;
  }
  if (precision == Precision::Fp32) {
    c.reason = "fp32 on the CPU: not timed";
    return c;
  }
  const int64_t b = std::clamp<int64_t>(batch, 1, 16);
  std::tie(c.sdpa_ms, c.math_ms) = time_attention(probe, b, precision, device);
  if (c.math_ms < 0.8 * c.sdpa_ms) c.attention = config::Attention::Math;
  c.reason = fmt::format("timed forward + backward at ({}, {}, {}, {}) {} on {}: sdpa {:.2f} ms, math {:.2f} ms", b,
                         probe.heads, probe.seq, probe.head_size, precision_name(precision), device.str(), c.sdpa_ms,
                         c.math_ms);
  return c;
}

}  // namespace trainer::engine
