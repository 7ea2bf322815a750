#include "engine/loop/train_record.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "config/arch.hpp"
#include "config/schema.hpp"

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
  rec.tta_loss = r.tta_loss;
  rec.tta_accuracy = r.tta_accuracy;
  rec.tta_top5 = r.tta_top5;
  if (!ema) return;
  rec.ema_loss = ema->loss;
  rec.ema_accuracy = ema->accuracy;
  rec.ema_top5 = ema->top5;
  rec.ema_ppl = ema->ppl;
  rec.ema_bpb = ema->bpb;
}

std::vector<obs::HParam> run_hparams(const config::RunConfig& cfg) {
  static const std::set<std::string> kAlways = {"model.arch",        "optim.name",      "optim.lr", "train.batch_size",
                                                "train.global_batch_size", "train.precision", "run.seed"};
  config::RunConfig bound = cfg;  // describe_fields binds to a config it may write
  std::vector<obs::HParam> out;
  for (const auto& f : config::describe_fields(bound)) {
    if (f.key == "run.name" || f.key == "run.out_dir") continue;
    if (!config::applies_to_arch(f, cfg.model.arch)) continue;
    const std::string v = config::value_text(f);
    if (!kAlways.count(f.key) && !(f.changes_training && v != config::default_text(f))) continue;
    obs::HParam h;
    h.name = f.key;
    if (f.type == config::FieldType::Int || f.type == config::FieldType::Float) {
      h.kind = obs::HParam::Kind::Number;
      h.number = std::strtod(v.c_str(), nullptr);
    } else if (f.type == config::FieldType::Bool) {
      h.kind = obs::HParam::Kind::Bool;
      h.flag = v == "true";
    } else {
      h.text = v.size() >= 2 && v.front() == '"' && v.back() == '"' ? v.substr(1, v.size() - 2) : v;
    }
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<std::string> hparam_metric_tags(const config::RunConfig& cfg) {
  if (config::takes_tokens(cfg.model.arch)) return {"eval/loss", "eval/bpb", "train/loss"};
  return {"eval/loss", "eval/accuracy", "train/loss"};
}

obs::RunLogOptions run_log_options(const config::LogConfig& log, bool primary, const io::RunDir& dir, int64_t total_steps) {
  obs::RunLogOptions lo;
  lo.primary = primary;
  lo.jsonl = log.jsonl;
  lo.jsonl_path = dir.metrics_file().string();
  lo.tensorboard = log.tensorboard;
  lo.tensorboard_dir = (dir.root / "tb").string();
  lo.progress_bar = obs::progress_bar_wanted(log.progress, isatty(STDOUT_FILENO) != 0);
  lo.total_steps = total_steps;
  return lo;
}

void throw_nonfinite_loss(double mean, double local, int64_t step, const dist::LaunchEnv& env) {
  if (!std::isfinite(local))
    spdlog::error("rank {}: non-finite training loss ({}) in the steps up to {}", env.rank, number_text(local), step);
  throw std::runtime_error("training loss is " + number_text(mean) + " in the steps up to " + std::to_string(step) +
                           (env.world_size > 1 ? " (each rank's log says whether it saw it)" : "") +
                           "; train.nonfinite: abort stops here. Lower optim.lr, set train.grad_clip, use fp32, "
                           "or set train.nonfinite: skip | rollback");
}

void log_run_start(const RunStart& r) {
  spdlog::info("model {}: {} parameters; data: {}", r.model.arch(), r.model.global_num_parameters(), r.train.describe());
  if (r.val) spdlog::info("validation: {}", r.val->describe());
  if (r.dist.active())  // every rank's own log says where its collectives go
    spdlog::info("distributed: rank {} of {} ({}, pid {}), {} over {}", r.env.rank, r.env.world_size, r.env.launcher,
                 ::getpid(), r.dist.backend_name(), dist::describe(r.dist.net()));
  const int64_t world = r.env.world_size, ranks = r.data_ranks > 0 ? r.data_ranks : world;
  // tensor parallel: the ranks of one tp group read the same samples, so the batch counts dp ranks
  spdlog::info("device {}, precision {}, {} intra-op threads, world size {}; {} steps of {} samples "
               "({} per micro-batch x {} accumulation x {} {}), {} batches per epoch per rank",
               r.device.str(), config::name_of(r.t.precision), at::get_num_threads(), world, r.total_steps,
               r.t.batch_size * r.t.grad_accum * ranks, r.t.batch_size, r.t.grad_accum, ranks,
               ranks == world ? "ranks" : "data-parallel ranks", r.batches_per_epoch);
  if (!r.memory) return;
  std::string rows;
  for (const auto& row : r.memory->rows)
    rows += fmt::format("{}{} {}", rows.empty() ? "" : ", ", row.label, bytes_text(static_cast<double>(row.bytes)));
  spdlog::debug("memory plan of the strategy: {}; {} held across steps", rows,
                bytes_text(static_cast<double>(r.memory->fixed.total())));
}

void add_best(obs::EvalRecord& rec, const EarlyStopping& tracker) {
  rec.best_metric = tracker.metric();
  rec.best_value = tracker.best().value_or(0);
  rec.best_step = tracker.best_step();
}

void log_done_line(const obs::SummaryRecord& s) {
  const std::string attempts =
      s.attempts > 1 ? fmt::format(" over {} attempts ({:.1f} s in this one)", s.attempts, s.attempt_wall_s) : "";
  // a run that never evaluated has no best value: said so, not a best of 0 at step 0
  const std::string best = s.best_value ? fmt::format("best {} {:.4f} at step {}", s.best_metric, *s.best_value,
                                                      s.best_step.value_or(0))
                                        : std::string("no evaluation");
  spdlog::info("done: {} steps, {:.2f} epochs, {} samples in {:.1f} s{} ({}); {}", s.steps, s.epochs, s.samples,
               s.wall_s, attempts, s.stop_reason, best);
}

}  // namespace trainer::engine
