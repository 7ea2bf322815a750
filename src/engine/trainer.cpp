#include "engine/trainer.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "config/exit_codes.hpp"
#include "config/load.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "device/cuda_seam.hpp"
#include "device/device.hpp"
#include "dist/dist_context.hpp"
#include "dist/grad_sync.hpp"
#include "engine/checkpointing.hpp"
#include "engine/early_stopping.hpp"
#include "engine/eval_metrics.hpp"
#include "engine/loss_scaler.hpp"
#include "engine/optim.hpp"
#include "engine/precision.hpp"
#include "engine/schedule.hpp"
#include "engine/stop_signal.hpp"
#include "engine/train_step.hpp"
#include "models/model.hpp"
#include "obs/memory.hpp"
#include "obs/mfu.hpp"
#include "obs/run_log.hpp"

namespace trainer::engine {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Host time spent per phase since the last record. On CPU the ops run synchronously, so these are
// the phases' real durations; on CUDA they are host-timeline durations (see docs/METRICS.md).
struct IntervalTimes {
  int64_t steps = 0;
  double data_ms = 0, compute_ms = 0, comm_ms = 0, optim_ms = 0;
  Clock::time_point start = Clock::now();
};

double metric_value(const EvalResult& r, const std::string& metric) {
  if (metric == "loss") return r.loss;
  if (metric == "accuracy" && r.accuracy) return *r.accuracy;
  if (metric == "top5" && r.top5) return *r.top5;
  if (metric == "bpb" && r.bpb) return *r.bpb;
  if (metric == "ppl" && r.ppl) return *r.ppl;
  throw std::invalid_argument("metric '" + metric + "' is not reported by this model's evaluation");
}

class Trainer {
 public:
  Trainer(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir, const ResumeOptions& resume)
      : cfg_(cfg), env_(env), dir_(dir), resume_(resume) {}

  int run() {
    setup();
    resume();
    install_stop_handlers();
    int rc = train_loop();
    restore_stop_handlers();
    return rc;
  }

 private:
  // --- setup -------------------------------------------------------------------------------------
  void setup() {
    at::set_num_threads(static_cast<int>(device::default_threads(cfg_.train.threads, env_.local_world_size)));
    torch::manual_seed(static_cast<uint64_t>(cfg_.run.seed));
    if (cfg_.run.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    device_ = device::select_device(cfg_.train.device, env_.local_rank);
    precision_ = parse_precision(cfg_.train.precision);
    check_precision_supported(precision_, device_);
    if (precision_ == Precision::Bf16 && device_.is_cpu() && !cpu_has_native_bf16())
      spdlog::warn("precision bf16 on a CPU without avx512_bf16/amx_bf16: bf16 matmuls are emulated and likely "
                   "slower than fp32");
    if (device_.is_cuda()) {
      at::globalContext().setAllowTF32CuBLAS(cfg_.train.tf32);
      at::globalContext().setAllowTF32CuDNN(cfg_.train.tf32);
      at::globalContext().setBenchmarkCuDNN(!cfg_.run.deterministic);
    }
    if (env_.world_size > 1)
      dist_ = dist::DistContext::create(env_, cfg_.dist, device_, config::config_hash(cfg_));

    models::ModelRegistry registry;
    models::register_builtin_models(registry);
    model_ = registry.create(cfg_.model);  // seeded above: every rank draws the same initial weights
    model_->to(device_);
    if (cfg_.model.channels_last && model_->input_kind() == models::InputKind::Image) to_channels_last(*model_);
    if (dist_ && dist_->active()) dist_->broadcast_module(*model_);  // init_from or not, rank 0's weights are the truth
    params_ = unique_parameters(*model_);
    if (dist_ && dist_->active()) grad_sync_ = std::make_unique<dist::GradSync>(*dist_, params_, cfg_.dist.bucket_mb);

    auto datasets = data::create_datasets(cfg_.data, cfg_.model, cfg_.run.seed);
    train_set_ = datasets.train;
    val_set_ = datasets.val;
    tokens_ = train_set_->kind() == data::SampleKind::Tokens;
    train_loader_ = std::make_unique<data::DataLoader>(train_set_, loader_options(/*train=*/true));
    total_steps_ = total_optimizer_steps(cfg_.train, train_loader_->batches_per_epoch());
    samples_per_step_ = cfg_.train.batch_size * cfg_.train.grad_accum * env_.world_size;

    optimizer_ = build_optimizer(cfg_.optim, *model_);
    schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
    LossScalerConfig sc;
    sc.enabled = precision_ == Precision::Fp16;
    scaler_ = std::make_unique<LossScaler>(sc, device_);
    tracker_ = std::make_unique<EarlyStopping>(cfg_.train.early_stopping, tokens_ ? "loss" : "accuracy");

    flops_per_sample_ = model_->train_flops_per_sample(train_set_->sample_shape());
    peak_tflops_ = cfg_.log.peak_tflops;
    if (peak_tflops_ <= 0 && device_.is_cuda()) {
      for (const auto& d : device::cuda_devices())
        if (d.index == device_.index()) peak_tflops_ = obs::known_peak_tflops(d.name, cfg_.train.precision).value_or(0);
    }

    obs::RunLogOptions lo;
    lo.primary = env_.rank == 0;
    lo.jsonl = cfg_.log.jsonl;
    lo.jsonl_path = dir_.metrics_file().string();
    lo.tensorboard = cfg_.log.tensorboard;
    lo.tensorboard_dir = (dir_.root / "tb").string();
    lo.progress_bar = obs::progress_bar_wanted(cfg_.log.progress, isatty(STDOUT_FILENO) != 0);
    lo.total_steps = total_steps_;
    log_ = std::make_unique<obs::RunLog>(lo);

    spdlog::info("model {}: {} parameters; data: {}", model_->arch(), model_->num_parameters(), train_set_->describe());
    if (val_set_) spdlog::info("validation: {}", val_set_->describe());
    spdlog::info("device {}, precision {}, {} intra-op threads, world size {}; {} steps of {} samples "
                 "({} per micro-batch x {} accumulation x {} ranks), {} batches per epoch per rank",
                 device_.str(), cfg_.train.precision, at::get_num_threads(), env_.world_size, total_steps_,
                 samples_per_step_, cfg_.train.batch_size, cfg_.train.grad_accum, env_.world_size,
                 train_loader_->batches_per_epoch());
  }

  data::LoaderOptions loader_options(bool train) const {
    data::LoaderOptions o;
    o.batch_size = cfg_.train.batch_size;
    o.workers = cfg_.data.workers;
    o.prefetch = cfg_.data.prefetch;
    o.seed = cfg_.run.seed;
    o.rank = env_.rank;
    o.world_size = env_.world_size;
    o.train = train;
    o.pin_memory = device_.is_cuda();
    return o;
  }

  static void to_channels_last(torch::nn::Module& m) {
    torch::NoGradGuard ng;
    for (auto& p : m.parameters())
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }

  torch::Tensor to_device(const torch::Tensor& t, bool image_input) const {
    auto d = t.to(device_, /*non_blocking=*/true);
    if (image_input && cfg_.model.channels_last) d = d.contiguous(at::MemoryFormat::ChannelsLast);
    return d;
  }

  // --- the step ----------------------------------------------------------------------------------
  // One optimizer step: grad_accum micro-batches forward/backward, gradient sync, unscale, clip,
  // step, scale update, zero_grad. Returns the gradient norm before clipping (on the device) when
  // it was computed, an undefined tensor otherwise. No host synchronisation unless fp16 (the
  // scaler's skip decision) or `need_norm`.
  torch::Tensor train_step(int64_t step, bool need_norm, IntervalTimes& times) {
    model_->train();
    const int64_t accum = cfg_.train.grad_accum;
    for (int64_t micro = 0; micro < accum; ++micro) {
      auto t0 = Clock::now();
      auto batch = train_loader_->next();
      if (!batch) throw std::runtime_error("training data loader ended unexpectedly");
      times.data_ms += ms_since(t0);

      auto t1 = Clock::now();
      auto input = to_device(batch->input, !tokens_);
      auto target = to_device(batch->target, false);
      // gradients sync only on the last micro-batch: earlier ones accumulate locally (no_sync)
      if (grad_sync_) grad_sync_->set_enabled(micro == accum - 1);
      auto l = forward_backward(*model_, input, target, accum, precision_, device_, *scaler_);
      loss_sum_ = loss_sum_.defined() ? loss_sum_ + l : l;  // stays on the device until a log step
      ++loss_count_;
      times.compute_ms += ms_since(t1);
    }

    auto t2 = Clock::now();
    if (grad_sync_) grad_sync_->finish();  // waits for the buckets launched during the last backward
    times.comm_ms += ms_since(t2);

    auto t3 = Clock::now();
    auto applied = apply_gradients(*optimizer_, *scaler_, params_, cfg_.train.grad_clip, schedule_->lr_at(step), need_norm);
    if (!applied.stepped) ++skipped_steps_;
    times.optim_ms += ms_since(t3);
    ++times.steps;
    return applied.grad_norm;
  }

  // --- evaluation --------------------------------------------------------------------------------
  EvalResult evaluate() {
    torch::NoGradGuard ng;
    model_->eval();
    data::DataLoader loader(val_set_, loader_options(/*train=*/false));
    EvalAccumulator acc;
    for (int64_t b = 0; cfg_.train.eval_steps == 0 || b < cfg_.train.eval_steps; ++b) {
      auto batch = loader.next();
      if (!batch) break;
      auto input = to_device(batch->input, !tokens_);
      auto target = to_device(batch->target, false);
      AutocastScope autocast(precision_, device_);
      auto logits = model_->forward(input);  // (B, C) or (B, T, V)
      if (tokens_) acc.add_tokens(logits, target);
      else acc.add_classification(logits, target);
    }
    model_->train();
    return combine_ranks(acc.result());
  }

  // Each rank scored its own shard; the run's figures are count-weighted over all of them.
  EvalResult combine_ranks(EvalResult r) {
    if (!dist_ || !dist_->active()) return r;
    const double w = static_cast<double>(env_.world_size);
    const double n = static_cast<double>(r.count);
    const double count = dist_->all_reduce_mean(n) * w;
    auto weighted = [&](double v) { return count > 0 ? dist_->all_reduce_mean(v * n) * w / count : 0.0; };
    r.loss = weighted(r.loss);
    if (r.accuracy) r.accuracy = weighted(*r.accuracy);
    if (r.top5) r.top5 = weighted(*r.top5);
    if (tokens_) {
      r.ppl = perplexity(r.loss);
      r.bpb = bits_per_byte(r.loss);
    }
    r.count = static_cast<int64_t>(std::llround(count));
    return r;
  }

  // Evaluates, records, and returns true when early stopping asks the run to end.
  bool evaluate_and_record(int64_t step) {
    if (!val_set_) {
      if (!warned_no_val_) spdlog::warn("no validation data: evaluation is skipped");
      warned_no_val_ = true;
      return false;
    }
    auto t0 = Clock::now();
    EvalResult r = evaluate();
    if (r.count == 0) throw std::runtime_error("the validation split gave no samples to evaluate");
    const bool stop = tracker_->update(metric_value(r, tracker_->metric()), step);
    obs::EvalRecord rec;
    rec.step = step;
    rec.epoch = epochs_done();
    rec.time_s = std::chrono::duration<double>(Clock::now() - run_start_).count();
    rec.loss = r.loss;
    rec.count = r.count;
    rec.accuracy = r.accuracy;
    rec.top5 = r.top5;
    rec.ppl = r.ppl;
    rec.bpb = r.bpb;
    rec.eval_ms = ms_since(t0);
    rec.best_metric = tracker_->metric();
    rec.best_value = tracker_->best().value_or(0);
    rec.best_step = tracker_->best_step();
    log_->eval(rec);
    return stop;
  }

  // --- records -----------------------------------------------------------------------------------
  double epochs_done() const {
    auto st = train_loader_->state();
    const double per_epoch = static_cast<double>(train_loader_->batches_per_epoch() * cfg_.train.batch_size * env_.world_size);
    return static_cast<double>(st.epoch) + (per_epoch > 0 ? static_cast<double>(st.samples_consumed) / per_epoch : 0.0);
  }

  void record_train(int64_t step, const torch::Tensor& norm, IntervalTimes& times) {
    obs::TrainRecord r;
    const double elapsed_s = std::chrono::duration<double>(Clock::now() - times.start).count();
    const double n = static_cast<double>(times.steps);
    r.step = step;
    r.epoch = epochs_done();
    r.time_s = std::chrono::duration<double>(Clock::now() - run_start_).count();
    r.samples = step * samples_per_step_;
    r.loss = loss_sum_.item<double>() / static_cast<double>(loss_count_);  // the log step's host sync
    if (dist_ && dist_->active()) r.loss = dist_->all_reduce_mean(r.loss);
    if (!std::isfinite(r.loss) && !scaler_->enabled())
      throw std::runtime_error("training loss is " + std::to_string(r.loss) + " at step " + std::to_string(step) +
                               " (lower optim.lr, set train.grad_clip, or use fp32)");
    r.lr = schedule_->lr_at(step - 1);
    r.grad_norm = norm.item<double>();
    if (scaler_->enabled()) r.loss_scale = scaler_->state().scale;
    r.skipped_steps = skipped_steps_;
    r.samples_per_s = elapsed_s > 0 ? n * static_cast<double>(samples_per_step_) / elapsed_s : 0.0;
    if (tokens_) r.tokens_per_s = r.samples_per_s * static_cast<double>(train_set_->sample_shape().at(0));
    r.step_ms = elapsed_s * 1000.0 / n;
    r.data_wait_ms = times.data_ms / n;
    r.compute_ms = times.compute_ms / n;
    r.optim_ms = times.optim_ms / n;
    if (dist_ && dist_->active()) r.comm_ms = times.comm_ms / n;
    if (auto mem = obs::host_memory()) {
      r.rss_mb = mem->rss_mb;
      r.peak_rss_mb = mem->peak_rss_mb;
    }
    if (device_.is_cuda()) {
      auto m = device::cuda_memory_stats(device_.index());
      r.cuda_allocated_mb = static_cast<double>(m.allocated) / (1 << 20);
      r.cuda_reserved_mb = static_cast<double>(m.reserved) / (1 << 20);
      r.cuda_peak_allocated_mb = static_cast<double>(m.peak_allocated) / (1 << 20);
    }
    r.mfu = obs::compute_mfu(flops_per_sample_, r.samples_per_s, env_.world_size, peak_tflops_);
    log_->train(r);
    loss_sum_ = torch::Tensor();
    loss_count_ = 0;
    times = IntervalTimes{};
  }

  // --- checkpoints -------------------------------------------------------------------------------
  RunObjects objects() { return RunObjects{*model_, *optimizer_, *scaler_, *tracker_, device_}; }

  // --resume auto|never|PATH: every rank reads the same checkpoint (a shared filesystem on multi-node
  // jobs); a bad explicit PATH is an error, a bad newest checkpoint under auto falls back to an older one.
  void resume() {
    const auto ckpt_dir = checkpoint_dir(cfg_, dir_.root);
    if (env_.rank == 0) {
      io::CheckpointPolicy policy;
      policy.keep_last = cfg_.checkpoint.keep_last;
      policy.keep_every = cfg_.checkpoint.keep_every;
      store_ = std::make_unique<io::CheckpointStore>(ckpt_dir, policy);
    }
    if (dist_) dist_->barrier();  // the store cleaned stale temporary folders before anyone scans
    std::filesystem::path from;
    if (resume_.mode == "never") return;
    if (resume_.mode == "auto") {
      io::CheckpointStore reader(ckpt_dir, io::CheckpointPolicy{cfg_.checkpoint.keep_last, cfg_.checkpoint.keep_every});
      auto scan = reader.find_newest_complete();
      for (const auto& r : scan.rejected) spdlog::warn("skipping a checkpoint that does not verify: {}", r);
      if (!scan.newest) return;
      from = scan.newest->path;
    } else {
      from = io::resolve_checkpoint_path(resume_.mode);
    }
    auto content = io::load_checkpoint(from);  // verifies every checksum before deserialising
    auto pos = restore_checkpoint(content, from, cfg_, objects());
    train_loader_->restore(pos.loader);
    start_step_ = pos.step;
    spdlog::info("resumed from {} at step {} (epoch {}, {} samples into it)", from.string(), pos.step, pos.loader.epoch,
                 pos.loader.samples_consumed);
  }

  // Rank 0 writes (parameters and optimizer state are replicated). A failed save never touches the
  // previous checkpoints; checkpoint.on_error decides whether training goes on.
  void save_checkpoint(int64_t step) {
    if (!store_) return;
    auto t0 = Clock::now();
    try {
      auto path = store_->save(step, capture_checkpoint(cfg_, objects(), RunPosition{step, train_loader_->state()}));
      spdlog::info("checkpoint {} ({:.0f} ms)", path.string(), ms_since(t0));
    } catch (const io::CheckpointError& e) {
      if (cfg_.checkpoint.on_error == "abort") throw;
      spdlog::warn("checkpoint at step {} failed; training continues (checkpoint.on_error: warn): {}", step, e.what());
    }
  }

  // --- the loop ----------------------------------------------------------------------------------
  int train_loop() {
    run_start_ = Clock::now();
    IntervalTimes times;
    std::string stop_reason = cfg_.train.max_steps > 0 ? "max_steps" : "epochs";
    int64_t step = start_step_;
    bool evaluated_last = false;
    if (step >= total_steps_) {
      spdlog::info("the run is already complete ({} of {} steps); nothing to train", step, total_steps_);
      return kExitOk;
    }
    while (step < total_steps_) {
      if (dist_) dist_->set_step(step);
      const bool log_step = (step + 1) % cfg_.train.log_every == 0 || step + 1 == total_steps_;
      auto norm = train_step(step, log_step, times);
      ++step;
      log_->step_done(step);
      if (log_step) record_train(step, norm, times);
      // signals only set a flag; every rank acts on it at the same step boundary
      const bool stop = dist_ && dist_->active() ? dist_->any(stop_requested()) : stop_requested();
      if (stop) {
        spdlog::warn("{} received: saving a checkpoint at step {} and exiting with code {} (requeue me)",
                     stop_signal_name().empty() ? "a stop signal" : stop_signal_name(), step, kExitSavedAfterSignal);
        save_checkpoint(step);
        if (dist_) dist_->barrier();
        return kExitSavedAfterSignal;
      }
      if (cfg_.checkpoint.every_steps > 0 && step % cfg_.checkpoint.every_steps == 0 && step < total_steps_)
        save_checkpoint(step);
      evaluated_last = false;
      if (cfg_.train.eval_every > 0 && step % cfg_.train.eval_every == 0 && step < total_steps_) {
        evaluated_last = true;
        if (evaluate_and_record(step)) {
          stop_reason = "early_stopping";
          spdlog::info("early stopping at step {}: {} has not improved for {} evaluations (best {:.4f} at step {})",
                       step, tracker_->metric(), tracker_->evals_without_improvement(), tracker_->best().value_or(0),
                       tracker_->best_step());
          break;
        }
      }
    }
    if (!evaluated_last) evaluate_and_record(step);
    save_checkpoint(step);
    if (dist_) dist_->barrier();

    obs::SummaryRecord s;
    s.steps = step;
    s.epochs = epochs_done();
    s.samples = step * samples_per_step_;
    s.wall_s = std::chrono::duration<double>(Clock::now() - run_start_).count();
    s.stop_reason = stop_reason;
    s.best_metric = tracker_->metric();
    s.best_value = tracker_->best();
    if (tracker_->best()) s.best_step = tracker_->best_step();
    s.num_parameters = model_->num_parameters();
    s.world_size = env_.world_size;
    s.device = device_.str();
    s.precision = cfg_.train.precision;
    log_->summary(s);
    spdlog::info("done: {} steps, {:.2f} epochs, {} samples in {:.1f} s ({}); best {} {:.4f} at step {}", s.steps,
                 s.epochs, s.samples, s.wall_s, stop_reason, s.best_metric, s.best_value.value_or(0),
                 s.best_step.value_or(0));
    return kExitOk;
  }

  const config::RunConfig& cfg_;
  const dist::LaunchEnv& env_;
  const io::RunDir& dir_;
  ResumeOptions resume_;
  std::unique_ptr<io::CheckpointStore> store_;  // rank 0 only
  int64_t start_step_ = 0;
  torch::Device device_{torch::kCPU};
  Precision precision_ = Precision::Fp32;
  std::unique_ptr<dist::DistContext> dist_;
  std::unique_ptr<dist::GradSync> grad_sync_;  // declared after dist_: destroyed before it
  models::ModelPtr model_;
  std::vector<torch::Tensor> params_;
  std::shared_ptr<data::Dataset> train_set_, val_set_;
  bool tokens_ = false;
  std::unique_ptr<data::DataLoader> train_loader_;
  int64_t total_steps_ = 0, samples_per_step_ = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<EarlyStopping> tracker_;
  std::unique_ptr<obs::RunLog> log_;
  double flops_per_sample_ = 0, peak_tflops_ = 0;
  torch::Tensor loss_sum_;
  int64_t loss_count_ = 0, skipped_steps_ = 0;
  bool warned_no_val_ = false;
  Clock::time_point run_start_;
};

}  // namespace

int64_t total_optimizer_steps(const config::TrainConfig& t, int64_t batches_per_epoch) {
  if (t.max_steps > 0) return t.max_steps;
  const double micro = t.epochs * static_cast<double>(batches_per_epoch);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(micro / static_cast<double>(t.grad_accum) - 1e-9)));
}

int run_training(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir,
                 const ResumeOptions& resume) {
  Trainer t(cfg, env, dir, resume);
  return t.run();
}

}  // namespace trainer::engine
