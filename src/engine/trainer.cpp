#include "engine/trainer.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "config/exit_codes.hpp"
#include "config/load.hpp"
#include "config/schema.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "device/cuda_graph.hpp"
#include "device/cuda_seam.hpp"
#include "device/device.hpp"
#include "dist/dist_context.hpp"
#include "engine/checkpoint_manager.hpp"
#include "engine/data_parallel.hpp"
#include "engine/early_stopping.hpp"
#include "engine/ema.hpp"
#include "engine/evaluator.hpp"
#include "engine/finetune.hpp"
#include "engine/graphed_step.hpp"
#include "engine/loss_scaler.hpp"
#include "engine/optim.hpp"
#include "engine/precision.hpp"
#include "engine/resume_check.hpp"
#include "engine/schedule.hpp"
#include "engine/stop_signal.hpp"
#include "engine/step_runner.hpp"
#include "engine/train_record.hpp"
#include "engine/startup_planner.hpp"
#include "obs/profiler.hpp"
#include "models/model.hpp"
#include "obs/history.hpp"
#include "obs/run_log.hpp"

namespace trainer::engine {
namespace {

// A multi-rank run agrees on a pending stop signal at least this often (and on every log step).
constexpr int64_t kStopCheckEvery = 10;

class Trainer {
 public:
  Trainer(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir, const ResumeOptions& resume)
      : cfg_(cfg), env_(env), dir_(dir), resume_(resume) {}

  int run() {
    setup();
    resume();
    install_stop_handlers();
    int rc = train_loop();
    // after a stop signal's checkpoint the process is on its way out: more signals of the same burst
    // (schedulers repeat SIGTERM) must not kill it between the saved checkpoint and exit 75, so the
    // handlers stay (found by the SIGTERM-burst test once saves got faster); otherwise the previous
    // handlers come back
    if (rc != kExitSavedAfterSignal) restore_stop_handlers();
    return rc;
  }

 private:
  // --- setup -------------------------------------------------------------------------------------
  void setup() {
    const auto proc = configure_process(cfg_, env_);
    device_ = proc.device;
    precision_ = proc.precision;
    // a single process is a world of one: the same calls, all no-ops
    dist_ = dist::DistContext::create(env_, cfg_.dist, device_, config::config_hash(cfg_));

    StartupPlanner planner(cfg_, env_, dist_.get(), device_, precision_, dir_.root);
    spec_ = &models::builtin_models().spec(cfg_.model.arch);
    // a family either times model.attention auto at start (GPT) or decides it itself (ViT)
    if (spec_->measure_attention && cfg_.model.attention == config::Attention::Auto) planner.resolve_attention();
    model_ = build_run_model(cfg_);  // seeded above: every rank draws the same weights; train.freeze applied
    model_->to(device_);
    if (cfg_.model.channels_last && model_->input_kind() == models::InputKind::Image) models::to_channels_last(*model_);
    params_ = unique_parameters(*model_);
    parallel_ = make_data_parallel(*dist_, cfg_.dist);
    parallel_->prepare(*model_, params_);  // rank 0's weights are the truth (model.init loads later, on every rank)
    if (cfg_.train.ema.decay > 0) ema_ = make_ema(cfg_, *model_, device_, parallel_.get());  // the broadcast weights

    auto datasets = data::create_datasets(cfg_.data, cfg_.model, cfg_.run.seed);
    train_set_ = datasets.train;
    val_set_ = datasets.val;
    tokens_ = train_set_->kind() == data::SampleKind::Tokens;
    if (cfg_.train.batch_size == 0) planner.choose_micro_batch(*train_set_);
    train_loader_ = std::make_unique<data::DataLoader>(train_set_, loader_options(/*train=*/true));
    if (val_set_)
      evaluator_ = std::make_unique<Evaluator>(
          val_set_,
          EvalSetup{loader_options(/*train=*/false), precision_, device_, tokens_, cfg_.model.channels_last,
                    cfg_.train.eval_steps, config::bytes_per_token(cfg_.data)},
          dist_.get(), env_.world_size);
    total_steps_ = total_optimizer_steps(cfg_.train, train_loader_->batches_per_epoch());
    samples_per_step_ = cfg_.train.batch_size * cfg_.train.grad_accum * env_.world_size;

    optimizer_ = parallel_->make_optimizer(cfg_.optim, *model_);  // sharded: this rank's pieces only
    schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
    LossScalerConfig sc;
    sc.enabled = precision_ == Precision::Fp16;
    scaler_ = std::make_unique<LossScaler>(sc, device_);
    tracker_ = std::make_unique<EarlyStopping>(cfg_.train.early_stopping, spec_->rules.eval_metrics.front());

    steps_ = std::make_unique<StepRunner>(
        StepParts{*model_, params_, *train_loader_, *optimizer_, *scaler_,
                  [this](int64_t step) { return schedule_->lr_at(step); }, *parallel_},
        StepSettings{cfg_.train.grad_accum, cfg_.train.grad_clip, cfg_.train.nonfinite, precision_, device_, tokens_,
                     cfg_.model.channels_last, env_.rank, cfg_.train.label_smoothing, cfg_.data.mixup, cfg_.data.cutmix,
                     cfg_.model.num_classes, cfg_.run.seed});
    if (cfg_.train.cuda_graphs) {
      GraphConditions c;
      c.cuda = device_.is_cuda();
      c.world_size = env_.world_size;
      c.precision = precision_;
      c.nonfinite = cfg_.train.nonfinite;
      c.fused_optimizer = cfg_.optim.fused;
      c.activation_checkpointing = cfg_.model.activation_checkpointing;
      steps_->enable_graphs(c);
    }

    flops_per_sample_ = model_->train_flops_per_sample(train_set_->sample_shape());
    peak_tflops_ = peak_tflops_for(cfg_, device_);

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
    if (dist_->active())  // every rank's own log says where its collectives go
      spdlog::info("distributed: rank {} of {} ({}), {} over {}", env_.rank, env_.world_size, env_.launcher,
                   dist_->backend_name(), dist::describe(dist_->net()));
    spdlog::info("device {}, precision {}, {} intra-op threads, world size {}; {} steps of {} samples "
                 "({} per micro-batch x {} accumulation x {} ranks), {} batches per epoch per rank",
                 device_.str(), config::name_of(cfg_.train.precision), at::get_num_threads(), env_.world_size, total_steps_,
                 samples_per_step_, cfg_.train.batch_size, cfg_.train.grad_accum, env_.world_size,
                 train_loader_->batches_per_epoch());
  }

  data::LoaderOptions loader_options(bool train) const { return run_loader_options(cfg_, env_, device_, train); }

  // --- evaluation (engine/evaluator.hpp) -----------------------------------------------------------
  // Evaluates, records, and returns true when early stopping asks the run to end.
  bool evaluate_and_record(int64_t step) {
    if (!val_set_) {
      if (!warned_no_val_) spdlog::warn("no validation data: evaluation is skipped");
      warned_no_val_ = true;
      return false;
    }
    auto t0 = Clock::now();
    EvalResult r = evaluator_->run(*model_);
    if (r.count == 0) throw std::runtime_error("the validation split gave no samples to evaluate");
    // early stopping and `best` follow the trained weights; the EMA's figures ride along
    const bool stop = tracker_->update(metric_value(r, tracker_->metric()), step);
    std::optional<EvalResult> ema;
    if (ema_ && cfg_.train.ema.eval) ema = evaluator_->run(ema_->model());
    obs::EvalRecord rec;
    rec.step = step;
    rec.epoch = epochs_done();
    rec.time_s = clock_s();
    add_eval_figures(rec, r, ema ? &*ema : nullptr);
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
    if (steps_->loss_count() == 0) {  // every step of the interval was skipped (the same on every rank)
      times = IntervalTimes{};
      return;
    }
    obs::TrainRecord r;
    r.step = step;
    r.epoch = epochs_done();
    r.time_s = clock_s();
    r.samples = step * samples_per_step_;
    const double local_loss =
        steps_->loss_sum().item<double>() / static_cast<double>(steps_->loss_count());  // the log step's host sync
    r.loss = local_loss;
    r.loss = dist_->all_reduce_mean(r.loss);
    if (!std::isfinite(r.loss) && !scaler_->enabled()) {
      if (!std::isfinite(local_loss))
        spdlog::error("rank {}: non-finite training loss ({}) in the steps up to {}", env_.rank, number_text(local_loss),
                      step);
      throw std::runtime_error("training loss is " + number_text(r.loss) + " in the steps up to " +
                               std::to_string(step) + (env_.world_size > 1 ? " (each rank's log says whether it saw it)" : "") +
                               "; train.nonfinite: abort stops here. Lower optim.lr, set train.grad_clip, use fp32, "
                               "or set train.nonfinite: skip | rollback");
    }
    resume_check_.compare(step, r.loss);
    r.lr = schedule_->lr_at(step - 1);
    r.grad_norm = norm.item<double>();
    if (scaler_->enabled()) r.loss_scale = scaler_->state().scale;
    r.skipped_steps = steps_->skipped_steps();
    add_measurements(r, times,
                     MeasureSetup{samples_per_step_, tokens_ ? train_set_->sample_shape().at(0) : 0, flops_per_sample_,
                                  peak_tflops_, env_.world_size, device_});
    log_->train(r);
    steps_->reset_loss();
    times = IntervalTimes{};
  }

  // --- checkpoints (engine/checkpoint_manager.hpp) ------------------------------------------------
  RunObjects objects() {
    return RunObjects{*model_, *optimizer_, *scaler_, *tracker_, device_, parallel_.get(), ema_.get()};
  }

  // The run's training clock: the seconds of the attempts before this one (up to the checkpoint it
  // resumed from) plus this attempt's.
  double clock_s() const { return clock_offset_s_ + std::chrono::duration<double>(Clock::now() - run_start_).count(); }

  // --resume auto|never|PATH: every rank restores the same checkpoint; the resume check then compares
  // the losses of the steps the interrupted run logged after it, and those steps are not logged twice.
  void resume() {
    ckpt_ = std::make_unique<CheckpointManager>(cfg_, env_, dist_.get(), dir_.root, objects(), [this](int64_t step) {
      return RunPosition{step, train_loader_->state(), env_.world_size, clock_s()};
    });
    const auto history = obs::read_history(dir_.metrics_file());
    attempt_.attempt = history.attempts + 1;
    previous_wall_s_ = history.wall_s;
    const auto resumed = ckpt_->resume(resume_.mode);
    if (!resumed) {
      {
        FullParams whole(parallel_.get(), /*write=*/true);  // dist.sharding full: the weights it changes
        load_initial_weights(*model_, cfg_.model, dir_.root, env_.rank == 0);  // model.init
      }
      if (ema_) ema_->reset_from_live();  // the EMA starts from the weights the run starts from
      return;
    }
    const auto& pos = resumed->pos;
    train_loader_->restore(pos.loader);
    start_step_ = pos.step;
    clock_offset_s_ = pos.time_s;
    attempt_.start_step = pos.step;
    attempt_.time_s = pos.time_s;
    attempt_.resumed_from = resumed->from.string();
    spdlog::info("resumed from {} at step {} (epoch {}, {} samples into it); attempt {}", resumed->from.string(),
                 pos.step, pos.loader.epoch, pos.loader.samples_consumed, attempt_.attempt);
    if (pos.world_size > 0 && pos.world_size != env_.world_size) adapt_to_world_size(pos);
    if (cfg_.checkpoint.verify_tolerance > 0) {
      resume_check_ = ResumeCheck(history.train_losses, start_step_, cfg_.train.log_every,
                                  cfg_.checkpoint.verify_tolerance);
      if (resume_check_.pending() > 0)
        spdlog::info("resume check: the interrupted run logged {} step(s) after step {}; their losses will be compared",
                     resume_check_.pending(), start_step_);
      // the check holds the recomputed steps to the logged ones: they are logged once, by the first attempt
      if (history.last_step > start_step_) log_->skip_records_until(history.last_step);
    }
  }

  // A checkpoint saved by another number of ranks: parameters and optimizer state are replicated, so
  // they load as they are; the data position is global, so the loader continues at the same sample;
  // every rank takes the saved generator state (the ranks' streams are re-derived from it).
  void adapt_to_world_size(const RunPosition& pos) {
    const int64_t saved_global = cfg_.train.batch_size * pos.world_size;  // per micro-step, at save time
    spdlog::warn("resuming a checkpoint of {} rank(s) on {}: the data continue at global sample {} of epoch {}, "
                 "and every rank's random generators are re-derived from the saved state",
                 pos.world_size, env_.world_size, pos.loader.samples_consumed, pos.loader.epoch);
    if (cfg_.train.global_batch_size > 0 && cfg_.train.global_batch_size == samples_per_step_)
      spdlog::info("train.global_batch_size {} kept: {} per micro-batch x {} accumulation x {} ranks",
                   cfg_.train.global_batch_size, cfg_.train.batch_size, cfg_.train.grad_accum, env_.world_size);
    else
      spdlog::warn("the global batch changes to {} samples per step ({} ranks); set train.global_batch_size to keep it "
                   "across world sizes (was {} x accumulation)",
                   samples_per_step_, env_.world_size, saved_global);
    if (cfg_.train.max_steps == 0) {
      // a run sized in epochs ends after the same number of samples: the remaining steps are
      // recounted at the new samples per step, and the schedule is laid out over the new total
      const int64_t per_epoch = train_loader_->batches_per_epoch() * cfg_.train.batch_size * env_.world_size;
      const double target = cfg_.train.epochs * static_cast<double>(per_epoch);
      const double done = static_cast<double>(pos.loader.epoch * per_epoch + pos.loader.samples_consumed);
      const int64_t left = std::max<int64_t>(
          0, static_cast<int64_t>(std::ceil((target - done) / static_cast<double>(samples_per_step_) - 1e-9)));
      if (start_step_ + left != total_steps_) {
        spdlog::info("the run is sized in epochs: {} steps in all now (was {})", start_step_ + left, total_steps_);
        total_steps_ = start_step_ + left;
        schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
      }
    }
  }

  // --- the loop ----------------------------------------------------------------------------------
  // Signals only set a flag; every rank acts on it at the same step boundary. With several ranks
  // agreeing costs a collective and a host sync, so they agree only on log steps and every
  // kStopCheckEvery steps (the same steps on every rank), never on each step of the hot path.
  bool stop_agreed(int64_t step, bool log_step) {
    if (!dist_->active()) return stop_requested();  // one process: every step, for free
    return (log_step || step % kStopCheckEvery == 0) && dist_->any(stop_requested());
  }

  // A stop signal: one checkpoint at this step boundary, then exit 75 (a stop before the first step
  // has nothing new to save: the run resumes where it stands). A save that fails exits 74 instead.
  int stop_for_signal(int64_t step) {
    const std::string sig = stop_signal_name().empty() ? "a stop signal" : stop_signal_name();
    if (step == start_step_) {
      spdlog::warn("{} received during start-up, before step {}: nothing new to save; exiting with code {} "
                   "(requeue me)", sig, step + 1, kExitSavedAfterSignal);
    } else {
      spdlog::warn("{} received: saving a checkpoint at step {} and exiting with code {} (requeue me)", sig, step,
                   kExitSavedAfterSignal);
      ckpt_->save(step, SaveKind::Signal);
    }
    dist_->barrier();
    ckpt_->requeue_if_asked();
    return kExitSavedAfterSignal;
  }

  // train.nonfinite skip|rollback after each step: a finite step resets the count of skips in a row;
  // a non-finite one is skipped (at most train.max_nonfinite in a row) or rolled back to the last
  // checkpoint, moving `step` back (returns true then: the loop starts over from there).
  bool handle_nonfinite(bool nonfinite, int64_t& step, IntervalTimes& times) {
    if (!nonfinite) {
      nonfinite_in_row_ = 0;
      return false;
    }
    if (cfg_.train.nonfinite == config::NonFinite::Rollback) {
      steps_->reset_loss();
      times = IntervalTimes{};
      step = ckpt_->roll_back(step);
      return true;
    }
    if (++nonfinite_in_row_ > cfg_.train.max_nonfinite)
      throw std::runtime_error(fmt::format("non-finite gradients in {} consecutive steps up to step {} "
                                           "(train.max_nonfinite {}): giving up",
                                           nonfinite_in_row_, step, cfg_.train.max_nonfinite));
    spdlog::warn("non-finite gradients at step {}: step skipped ({} in a row, at most {})", step, nonfinite_in_row_,
                 cfg_.train.max_nonfinite);
    return false;
  }

  // Periodic checkpoint and evaluation after `step`; returns true when early stopping ends the run.
  bool checkpoint_and_evaluate(int64_t step, bool& evaluated) {
    evaluated = false;
    if (step >= total_steps_) return false;  // the end of the run saves and evaluates once, below
    bool saved = false;
    if (cfg_.checkpoint.every_steps > 0 && step % cfg_.checkpoint.every_steps == 0)
      saved = ckpt_->save(step, SaveKind::Periodic);
    if (cfg_.train.eval_every <= 0 || step % cfg_.train.eval_every != 0) return false;
    evaluated = true;
    const bool stop_early = evaluate_and_record(step);
    ckpt_->keep_best(step, saved);
    if (stop_early)
      spdlog::info("early stopping at step {}: {} has not improved for {} evaluations (best {:.4f} at step {})", step,
                   tracker_->metric(), tracker_->evals_without_improvement(), tracker_->best().value_or(0),
                   tracker_->best_step());
    return stop_early;
  }

  int train_loop() {
    run_start_ = Clock::now();
    log_->attempt(attempt_);
    if (step_is_final(start_step_)) {
      spdlog::info("the run is already complete ({} of {} steps); nothing to train", start_step_, total_steps_);
      return kExitOk;
    }
    if (stop_agreed(start_step_, /*log_step=*/true)) return stop_for_signal(start_step_);
    IntervalTimes times;
    std::string stop_reason = cfg_.train.max_steps > 0 ? "max_steps" : "epochs";
    int64_t step = start_step_;
    bool evaluated_last = false;
    obs::StepProfiler profiler(cfg_.profile.start_step, cfg_.profile.steps, dir_.root / "profile", env_.rank,
                               device_.is_cuda(), cfg_.profile.record_shapes);
    // a graph is captured on a stream other than the default one: with train.cuda_graphs every step,
    // evaluation and checkpoint of the loop runs on that one stream, in order
    std::optional<device::CudaSideStream> graph_stream;
    if (steps_->graphed()) graph_stream.emplace(device_.index());
    while (step < total_steps_) {
      dist_->set_step(step);
      const bool log_step = step_is_final(step + 1) || (step + 1) % cfg_.train.log_every == 0;
      profiler.before_step(step);
      auto outcome = steps_->run(step, log_step, times);
      profiler.after_step(step);
      ++step;
      if (handle_nonfinite(outcome.nonfinite, step, times)) continue;  // rolled back
      if (ema_ && !outcome.nonfinite) ema_->after_step(step);         // a skipped step changed no weight
      log_->step_done(step);
      if (log_step) record_train(step, outcome.grad_norm, times);
      if (stop_agreed(step, log_step)) return stop_for_signal(step);
      if (checkpoint_and_evaluate(step, evaluated_last)) {
        stop_reason = "early_stopping";
        break;
      }
    }
    return finish(step, stop_reason, evaluated_last);
  }

  // The end of the run: a last evaluation (unless the last step had one), the final checkpoint
  // (never optional: CheckpointFailed), the summary.
  int finish(int64_t step, const std::string& stop_reason, bool evaluated_last) {
    if (!evaluated_last) evaluate_and_record(step);
    if (ckpt_->save(step, SaveKind::Final)) ckpt_->keep_best(step, /*saved_at_step=*/true);
    dist_->barrier();
    write_summary(step, stop_reason);
    return kExitOk;
  }

  bool step_is_final(int64_t step) const { return step >= total_steps_; }

  void write_summary(int64_t step, const std::string& stop_reason) {
    obs::SummaryRecord s;
    s.steps = step;
    s.epochs = epochs_done();
    s.samples = step * samples_per_step_;
    s.attempt_wall_s = std::chrono::duration<double>(Clock::now() - run_start_).count();
    s.wall_s = previous_wall_s_ + s.attempt_wall_s;
    s.attempts = attempt_.attempt;
    s.stop_reason = stop_reason;
    s.best_metric = tracker_->metric();
    s.best_value = tracker_->best();
    if (tracker_->best()) s.best_step = tracker_->best_step();
    s.num_parameters = model_->num_parameters();
    s.world_size = env_.world_size;
    s.device = device_.str();
    s.precision = config::name_of(cfg_.train.precision);
    log_->summary(s);
    const std::string attempts =
        s.attempts > 1 ? fmt::format(" over {} attempts ({:.1f} s in this one)", s.attempts, s.attempt_wall_s) : "";
    spdlog::info("done: {} steps, {:.2f} epochs, {} samples in {:.1f} s{} ({}); best {} {:.4f} at step {}", s.steps,
                 s.epochs, s.samples, s.wall_s, attempts, stop_reason, s.best_metric, s.best_value.value_or(0),
                 s.best_step.value_or(0));
  }

  config::RunConfig cfg_;  // a copy: train.batch_size auto fills in the micro-batch
  const dist::LaunchEnv& env_;
  const io::RunDir& dir_;
  ResumeOptions resume_;
  int64_t start_step_ = 0;
  torch::Device device_{torch::kCPU};
  Precision precision_ = Precision::Fp32;
  std::unique_ptr<dist::DistContext> dist_;
  std::unique_ptr<DataParallel> parallel_;  // declared after dist_: destroyed before it
  const models::ModelSpec* spec_ = nullptr;  // the family of model.arch
  models::ModelPtr model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<Ema> ema_;  // train.ema, when on
  std::shared_ptr<data::Dataset> train_set_, val_set_;
  bool tokens_ = false;
  std::unique_ptr<data::DataLoader> train_loader_;
  int64_t total_steps_ = 0, samples_per_step_ = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<EarlyStopping> tracker_;
  std::unique_ptr<Evaluator> evaluator_;  // when there is a validation split
  std::unique_ptr<obs::RunLog> log_;
  double flops_per_sample_ = 0, peak_tflops_ = 0;
  std::unique_ptr<StepRunner> steps_;  // after the objects it steps
  int64_t nonfinite_in_row_ = 0;            // train.nonfinite: skip
  std::unique_ptr<CheckpointManager> ckpt_;  // after the objects it saves and restores
  obs::AttemptRecord attempt_;               // this attempt: number, start step, resumed from
  double clock_offset_s_ = 0;                // the training clock at the checkpoint resumed from
  double previous_wall_s_ = 0;               // wall seconds of the earlier attempts (metrics.jsonl)
  ResumeCheck resume_check_;  // checkpoint.verify_tolerance: the interrupted run's logged losses
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
