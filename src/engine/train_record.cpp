#include "engine/train_record.hpp"

#include "device/cuda_seam.hpp"
#include "device/nvml.hpp"
#include "obs/memory.hpp"
#include "obs/mfu.hpp"

namespace trainer::engine {

double peak_tflops_for(const config::RunConfig& cfg, const torch::Device& device) {
  if (cfg.log.peak_tflops > 0 || !device.is_cuda()) return cfg.log.peak_tflops;
  for (const auto& d : device::cuda_devices())
    if (d.index == device.index())
      return obs::known_peak_tflops(d.name, cfg.train.precision, cfg.train.tf32).value_or(0);
  return 0;
}

void add_measurements(obs::TrainRecord& r, const IntervalTimes& times, const MeasureSetup& m) {
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - times.start).count();
  const double n = static_cast<double>(times.steps);
  r.samples_per_s = elapsed_s > 0 ? n * static_cast<double>(m.samples_per_step) / elapsed_s : 0.0;
  if (m.tokens_per_sample > 0) r.tokens_per_s = r.samples_per_s * static_cast<double>(m.tokens_per_sample);
  r.step_ms = elapsed_s * 1000.0 / n;
  r.data_wait_ms = times.data_ms / n;
  r.compute_ms = times.compute_ms / n;
  r.optim_ms = times.optim_ms / n;
  if (m.world_size > 1) r.comm_ms = times.comm_ms / n;
  if (auto mem = obs::host_memory()) {
    r.rss_mb = mem->rss_mb;
    r.peak_rss_mb = mem->peak_rss_mb;
  }
  if (m.device.is_cuda()) {
    auto s = device::cuda_memory_stats(m.device.index());
    r.cuda_allocated_mb = static_cast<double>(s.allocated) / (1 << 20);
    r.cuda_reserved_mb = static_cast<double>(s.reserved) / (1 << 20);
    r.cuda_peak_allocated_mb = static_cast<double>(s.peak_allocated) / (1 << 20);
    r.gpu_util_pct = device::gpu_utilization_percent(m.device.index());
  }
  if (times.held) {
    r.param_bytes = times.held->params;
    r.grad_bytes = times.held->grads;
    r.optim_state_bytes = times.held->optimizer;
  }
  r.mfu = obs::compute_mfu(m.flops_per_sample, r.samples_per_s, m.world_size, m.peak_tflops);
}

void add_eval_figures(obs::EvalRecord& rec, const EvalResult& r, const EvalResult* ema) {
  rec.loss = r.loss;
  rec.count = r.count;
  rec.accuracy = r.accuracy;
  rec.top5 = r.top5;
  rec.ppl = r.ppl;
  rec.bpb = r.bpb;
  if (!ema) return;
  rec.ema_loss = ema->loss;
  rec.ema_accuracy = ema->accuracy;
  rec.ema_top5 = ema->top5;
  rec.ema_ppl = ema->ppl;
  rec.ema_bpb = ema->bpb;
}

}  // namespace trainer::engine
