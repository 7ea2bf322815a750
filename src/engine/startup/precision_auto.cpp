#include "engine/startup/precision_auto.hpp"

#include <fmt/format.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <tuple>

#include "device/cuda_seam.hpp"
#include "device/device.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "engine/step/train_step.hpp"

namespace trainer::engine {
namespace {

constexpr double kBf16Margin = 0.9;  // bf16 must take at most 90 % of fp32's time

std::string flags_text(const std::vector<std::string>& flags) {
  std::string s;
  for (const auto& f : flags) s += (s.empty() ? "" : " ") + f;
  return s;
}

}  // namespace

PrecisionChoice decide_precision(const PrecisionFacts& f) {
  PrecisionChoice c;
  c.facts = f;
  if (f.cuda) {
    const std::string cc = fmt::format("compute capability {}.{}", f.cc_major, f.cc_minor);
    if (f.cc_major >= 8) {
      c.precision = Precision::Bf16;
      c.reason = cc + ": bf16 tensor cores";
    } else if (f.cc_major == 7) {
      c.precision = Precision::Fp16;
      c.reason = cc + ": fp16 tensor cores without bf16 (fp16 with the dynamic loss scaler)";
    } else {
      c.precision = Precision::Fp32;
      c.reason = cc + ": no fp16 or bf16 tensor cores";
    }
    return c;
  }
  c.precision = Precision::Fp32;
  if (f.cpu_bf16_flags.empty()) {
    c.reason = "this CPU lists neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo: bf16 would be emulated, "
               "slower than fp32";
    return c;
  }
  const std::string flags = "CPU flags " + flags_text(f.cpu_bf16_flags);
  if (f.deterministic) {
    c.reason = flags + "; run.deterministic: fp32 without timing (a timed choice is not reproducible)";
    return c;
  }
  if (f.fp32_ms <= 0 || f.bf16_ms <= 0) {
    c.needs_probe = true;
    c.reason = flags + ": the probe of a forward + backward in fp32 and bf16 decides";
    return c;
  }
  const bool bf16 = f.bf16_ms <= kBf16Margin * f.fp32_ms;
  c.precision = bf16 ? Precision::Bf16 : Precision::Fp32;
  c.reason = fmt::format("{}; forward + backward at micro-batch {}, one thread's CPU time: fp32 {:.1f} ms, bf16 "
                         "{:.1f} ms ({}; bf16 is taken when at least 10 % faster)",
                         flags, f.probe_batch, f.fp32_ms, f.bf16_ms,
                         bf16 ? "bf16 faster" : f.bf16_ms < f.fp32_ms ? "bf16 less than 10 % faster" : "bf16 slower");
  return c;
}

std::pair<double, double> time_precisions(models::Model& model, const std::vector<int64_t>& sample_shape,
                                          int64_t vocab_or_classes, const torch::Device& device, bool channels_last,
                                          int64_t batch) {
  const bool tokens = model.input_kind() == models::InputKind::Tokens;
  std::vector<int64_t> shape = {batch};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  torch::Tensor input, target;
  if (tokens) {
    input = torch::randint(0, vocab_or_classes, shape, longs);                      // (B, T)
    target = torch::randint(0, vocab_or_classes, shape, longs);                     // (B, T)
  } else {
    input = torch::randn(shape, torch::TensorOptions().device(device));             // (B, C, H, W)
    if (channels_last) input = input.contiguous(at::MemoryFormat::ChannelsLast);
    target = torch::randint(0, vocab_or_classes, {batch}, longs);                   // (B)
  }
  LossScalerConfig sc;
  sc.enabled = false;
  LossScaler scaler(sc, device);
  model.train();
  // On a CPU the probe runs on one intra-op thread and reads that thread's CPU time: the kernels' work,
  // whatever else the host runs. Wall-clock medians over the run's threads varied 40x between runs of
  // one config on a busy 2-core host (a descheduled thread stalls its team at every barrier) and
  // flipped the choice from run to run (found from outside). A GPU's time is the wall clock.
  const bool cpu = !device.is_cuda();
  const int threads = at::get_num_threads();
  if (cpu) at::set_num_threads(1);
  struct Restore {
    bool on;
    int n;
    ~Restore() {
      if (on) at::set_num_threads(n);
    }
  } restore{cpu, threads};
  auto clock_ms = [cpu] {
    if (!cpu) return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
  };
  auto once = [&](Precision p) {
    const double t0 = clock_ms();
    (void)forward_backward(model, input, target, 1, p, device, scaler);
    for (auto& param : model.parameters()) param.mutable_grad() = torch::Tensor();
    return clock_ms() - t0;
  };
  const double warm = std::max(once(Precision::Fp32), once(Precision::Bf16));  // first calls pick kernels
  // alternating pairs, as many as fit about 0.3 s a precision (3 to 15), the fastest of each kept: the
  // repetition least disturbed by the host (caches, frequency) is the nearest to the kernels' cost
  const int reps = warm > 1000 ? 1 : std::clamp(static_cast<int>(300.0 / std::max(warm, 1.0)), 3, 15);
  double fp32 = 0, bf16 = 0;
  for (int r = 0; r < reps; ++r) {
    const double a = once(Precision::Fp32), b = once(Precision::Bf16);
    fp32 = r == 0 ? a : std::min(fp32, a);
    bf16 = r == 0 ? b : std::min(bf16, b);
  }
  return {fp32, bf16};
}

PrecisionFacts precision_facts(const config::RunConfig& cfg, const torch::Device& device) {
  PrecisionFacts f;
  f.deterministic = cfg.run.deterministic;
  f.cuda = device.is_cuda();
  if (f.cuda) {
    const int index = device.has_index() ? device.index() : 0;
    for (const auto& d : device::cuda_devices())
      if (d.index == index) f.cc_major = d.major, f.cc_minor = d.minor;
  } else {
    f.cpu_bf16_flags = device::cpu_bf16_flags();
  }
  return f;
}

PrecisionChoice choose_precision(const config::RunConfig& cfg, const torch::Device& device,
                                 const std::vector<int64_t>& sample_shape, int64_t vocab_or_classes, int64_t batch) {
  auto f = precision_facts(cfg, device);
  auto c = decide_precision(f);
  if (!c.needs_probe) return c;
  auto model = models::build_model_on(cfg.model, device);  // its weights do not matter, its shapes do
  const bool image = model->input_kind() == models::InputKind::Image;
  f.probe_batch = std::max<int64_t>(1, batch);
  std::tie(f.fp32_ms, f.bf16_ms) =
      time_precisions(*model, sample_shape, vocab_or_classes, device, cfg.model.channels_last && image, f.probe_batch);
  return decide_precision(f);
}

}  // namespace trainer::engine
