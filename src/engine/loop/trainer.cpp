#include "engine/loop/trainer.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <utility>

#include "config/exit_codes.hpp"
#include "config/load.hpp"
#include "config/schema.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "device/cuda_graph.hpp"
#include "device/cuda_seam.hpp"
#include "device/device.hpp"
#include "dist/dist_context.hpp"
#include "engine/checkpoint/checkpoint_manager.hpp"
#include "engine/loop/data_change.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "engine/eval/early_stopping.hpp"
#include "engine/step/ema.hpp"
#include "engine/eval/evaluator.hpp"
#include "engine/startup/finetune.hpp"
#include "engine/step/graphed_step.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "engine/loop/nonfinite_policy.hpp"
#include "engine/optim/optim.hpp"
#include "engine/optim/precision.hpp"
#include "engine/checkpoint/resume_check.hpp"
#include "engine/optim/schedule.hpp"
#include "engine/checkpoint/stop_signal.hpp"
#include "engine/step/step_runner.hpp"
#include "engine/loop/train_record.hpp"
#include "engine/startup/startup_planner.hpp"
#include "engine/loop/tp_run.hpp"
#include "engine/loop/world_recovery.hpp"
#include "obs/profiler.hpp"
#include "models/model.hpp"
#include "obs/history.hpp"
#include "obs/run_log.hpp"

namespace trainer::engine {
namespace {

class Trainer final : public WorldParts {
 public:
  Trainer(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir, const ResumeOptions& resume)
      : cfg_(cfg), env_(env), dir_(dir), resume_(resume) {}

  int run() {
    setup();
    if (!dist_->joining()) resume();
    install_stop_handlers();
    // a replacement rank joins the running group (its state comes from rank 0), unless the run ends first
    const int rc = dist_->joining() && !join_running_group() ? kExitOk : train_loop();
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
    const std::string hash = config::config_hash(cfg_);  // of the config as loaded (a regroup changes grad_accum)
    dist_ = dist::DistContext::create(env_, cfg_.dist, device_, hash);
    tp_ = TensorParallelRun(*dist_, cfg_.dist);  // the mesh (dp x tp) and the tp group the model is built over

    StartupPlanner planner(cfg_, env_, dist_.get(), device_, precision_, dir_.root);
    spec_ = &models::builtin_models().spec(cfg_.model.arch);
    // a family either times model.attention auto at start (GPT) or decides it itself (ViT)
    if (spec_->attention_probe && cfg_.model.attention == config::Attention::Auto) planner.resolve_attention();
    // seeded above: every rank draws the same weights (a tp rank then keeps its slices); train.freeze applied
    model_ = build_run_model(cfg_, device_, tp_.build_context());
    params_ = unique_parameters(*model_);
    parallel_ = make_parallel();
    const auto memory = parallel_->memory_plan(*model_, cfg_.optim);  // of the whole model: before prepare shards it
    parallel_->prepare(*model_, params_);  // rank 0's weights are the truth (model.init loads later, on every rank)
    if (cfg_.train.ema.decay > 0) ema_ = make_ema(cfg_, *model_, device_, parallel_.get());  // the broadcast weights

    auto datasets = data::create_datasets(cfg_.data, cfg_.model, cfg_.run.seed);
    train_set_ = datasets.train;
    val_set_ = datasets.val;
    tokens_ = train_set_->kind() == data::SampleKind::Tokens;
    if (cfg_.train.batch_size == 0) planner.choose_micro_batch(*train_set_);
    train_loader_ = std::make_unique<data::DataLoader>(train_set_, loader_options(/*train=*/true));
    if (val_set_) evaluator_ = make_evaluator();
    total_steps_ = total_optimizer_steps(cfg_.train, train_loader_->batches_per_epoch());
    recovery_ = std::make_unique<WorldRecovery>(*dist_, cfg_, hash, *this);  // once the micro-batch is chosen

    optimizer_ = parallel_->make_optimizer(cfg_.optim, *model_);  // sharded: this rank's pieces only
    schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
    scaler_ = std::make_unique<LossScaler>(LossScalerConfig{.enabled = precision_ == Precision::Fp16}, device_);
    tracker_ = std::make_unique<EarlyStopping>(cfg_.train.early_stopping, spec_->rules.eval_metrics.front());

    steps_ = make_step_runner();
    if (cfg_.train.cuda_graphs) steps_->enable_graphs(graph_conditions(cfg_, device_.is_cuda(), precision_, env_.world_size));

    flops_per_sample_ = model_->train_flops_per_sample(train_set_->sample_shape());
    peak_tflops_ = peak_tflops_for(cfg_, device_);

    log_ = std::make_unique<obs::RunLog>(run_log_options(cfg_.log, env_.rank == 0, dir_, total_steps_));

    planner.release_startup_memory();
    log_run_start(RunStart{*model_, *train_set_, val_set_.get(), *dist_, env_, device_, cfg_.train, total_steps_,
                           train_loader_->batches_per_epoch(), &memory});
  }

  // the ranks of one tp group read the same batches: the loader shards over the data-parallel ranks
  data::LoaderOptions loader_options(bool train) const {
    return run_loader_options(cfg_, tp_.data_env(env_), device_, train);
  }
  std::unique_ptr<DataParallel> make_parallel() {
    auto tp = tp_.make_strategy(*dist_, cfg_.dist);
    return tp ? std::move(tp) : make_data_parallel(*dist_, cfg_.dist);
  }
  int64_t data_world() const { return tp_.data_env(env_).world_size; }

  std::unique_ptr<Evaluator> make_evaluator() {
    EvalSetup e{loader_options(/*train=*/false), precision_,          device_, tokens_, cfg_.model.channels_last,
                cfg_.train.eval_steps,           config::bytes_per_token(cfg_.data)};
    return std::make_unique<Evaluator>(val_set_, e, dist_.get(), data_world());  // tp ranks score the same batches
  }

  std::unique_ptr<StepRunner> make_step_runner() {
    return std::make_unique<StepRunner>(
        StepParts{*model_, params_, *train_loader_, *optimizer_, *scaler_,
                  [this](int64_t step) { return schedule_->lr_at(step); }, *parallel_},
        StepSettings{cfg_.train.grad_accum, cfg_.train.grad_clip, cfg_.train.nonfinite, precision_, device_, tokens_,
                     cfg_.model.channels_last, env_.rank, cfg_.train.label_smoothing, cfg_.data.mixup, cfg_.data.cutmix,
                     cfg_.model.num_classes, cfg_.run.seed});
  }

  // --- the world size changes: dist.recovery in_process (engine/world_recovery.hpp) -------------
  // A replacement rank (TRAINER_JOIN, from `trainer launch`): joins the running group and takes
  // rank 0's state from the process group, not from a checkpoint.
  bool join_running_group() {
    make_checkpoint_manager();
    const auto joined = recovery_->join();
    if (!joined) return false;
    start_step_ = joined->step;
    clock_offset_s_ = joined->time_s;
    return true;
  }
  // WorldParts: what depends on the world size, rebuilt for the current group.
  void rebuild_world(int64_t grad_accum, const data::LoaderState& pos) override {
    auto interval = steps_->interval();
    env_.rank = dist_->rank();
    env_.world_size = dist_->world_size();
    cfg_.train.grad_accum = grad_accum;
    for (auto& p : params_) p.mutable_grad().reset();
    steps_.reset();  // it refers to the strategy and the loader replaced here
    parallel_ = make_parallel();
    parallel_->prepare(*model_, params_);
    train_loader_ = std::make_unique<data::DataLoader>(train_set_, loader_options(/*train=*/true));
    train_loader_->restore(pos);
    if (val_set_) evaluator_ = make_evaluator();
    steps_ = make_step_runner();
    steps_->take_over(interval);
    ckpt_->set_parallel(parallel_.get());
    if (ema_) ema_->set_parallel(parallel_.get());  // it held the strategy destroyed above
  }
  data::LoaderState loader_state() const override { return train_loader_->state(); }
  // A collective failed in the step at `step` or after it: the survivors go on (a new rank 0 takes
  // over the records rank 0 wrote, TensorBoard, the summary and the checkpoint store).
  void recover(const std::string& why, int64_t step) {
    if (!recovery_->recover(why, step)) return;
    log_ = std::make_unique<obs::RunLog>(run_log_options(cfg_.log, /*primary=*/true, dir_, total_steps_));
    log_->skip_records_until(obs::read_history(dir_.metrics_file()).last_step);  // what rank 0 wrote
    ckpt_->become_writer();
  }

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
    obs::EvalRecord rec{.step = step, .epoch = epochs_done(), .time_s = clock_s()};
    add_eval_figures(rec, r, ema ? &*ema : nullptr);
    rec.eval_ms = ms_since(t0);
    add_best(rec, *tracker_);
    log_->eval(rec);
    return stop;
  }

  // --- records -----------------------------------------------------------------------------------
  double epochs_done() const {
    auto st = train_loader_->state();
    const double per_epoch = static_cast<double>(train_loader_->batches_per_epoch() * cfg_.train.batch_size * data_world());
    return static_cast<double>(st.epoch) + (per_epoch > 0 ? static_cast<double>(st.samples_consumed) / per_epoch : 0.0);
  }

  void record_train(int64_t step, const torch::Tensor& norm) {
    IntervalTimes& times = loop_.times;
    if (steps_->loss_count() == 0) {  // every step of the interval was skipped (the same on every rank)
      times = IntervalTimes{};
      return;
    }
    const double local_loss =
        steps_->loss_sum().item<double>() / static_cast<double>(steps_->loss_count());  // the log step's host sync
    obs::TrainRecord r{.step = step, .epoch = epochs_done(), .time_s = clock_s(),
                       .samples = recovery_->samples_at(step), .loss = dist_->all_reduce_mean(local_loss),
                       .lr = schedule_->lr_at(step - 1)};
    r.world_size = recovery_->last_step_world();  // a record redone after a regroup: the world that ran the step
    if (!std::isfinite(r.loss) && !scaler_->enabled()) throw_nonfinite_loss(r.loss, local_loss, step, env_);
    resume_check_.compare(step, r.loss);
    r.grad_norm = norm.item<double>();
    if (tp_.active())  // the tp group's collectives inside the steps of this interval, per step
      r.tp_comm_ms = (tp_.seconds() - std::exchange(tp_seconds_, tp_.seconds())) * 1e3 / static_cast<double>(times.steps);
    if (scaler_->enabled()) r.loss_scale = scaler_->state().scale;
    r.skipped_steps = steps_->skipped_steps();
    add_measurements(r, times,
                     MeasureSetup{recovery_->samples_per_step(), tokens_ ? train_set_->sample_shape().at(0) : 0, flops_per_sample_,
                                  peak_tflops_, env_.world_size, device_});
    log_->train(r);
    steps_->reset_loss();
    times = IntervalTimes{};
  }

  // --- checkpoints (engine/checkpoint_manager.hpp) ------------------------------------------------
  RunObjects objects() override {
    return RunObjects{*model_, *optimizer_, *scaler_, *tracker_, device_, parallel_.get(), ema_.get()};
  }

  // The run's training clock: the seconds of the attempts before this one (up to the checkpoint it
  // resumed from) plus this attempt's.
  double clock_s() const { return clock_offset_s_ + std::chrono::duration<double>(Clock::now() - run_start_).count(); }

  // --resume auto|never|PATH: every rank restores the same checkpoint; the resume check then compares
  // the losses of the steps the interrupted run logged after it, and those steps are not logged twice.
  RunPosition position(int64_t step) const override { return {step, train_loader_->state(), data_world(), clock_s()}; }
  void make_checkpoint_manager() {
    ckpt_ = std::make_unique<CheckpointManager>(cfg_, env_, dist_.get(), dir_.root, objects(),
                                                [this](int64_t step) { return position(step); });
  }
  void resume() {
    make_checkpoint_manager();
    const auto history = obs::read_history(dir_.metrics_file());
    attempt_.attempt = history.attempts + 1;
    previous_wall_s_ = history.wall_s;
    const auto resumed = ckpt_->resume(resume_);
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
    if (pos.world_size > 0 && pos.world_size != data_world()) {
      const int64_t total = steps_at_new_world_size(cfg_.train, pos, data_world(), train_loader_->batches_per_epoch(),
                                                    start_step_, total_steps_);
      if (total != total_steps_) {
        total_steps_ = total;
        schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
      }
    }
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

  // --- the loop ----------------------------------------------------------------------------------
  // Signals only set a flag; every rank acts on it at the same step boundary (WorldRecovery::agree_stop).
  bool stop_agreed(int64_t step, bool log_step) { return recovery_->agree_stop(step, log_step, step_is_final(step)); }

  // Periodic checkpoint and evaluation after `step`; returns true when early stopping ends the run.
  bool checkpoint_and_evaluate(int64_t step) {
    loop_.evaluated_last = false;
    if (step >= total_steps_) return false;  // the end of the run saves and evaluates once, below
    bool saved = false;
    if (cfg_.checkpoint.every_steps > 0 && step % cfg_.checkpoint.every_steps == 0)
      saved = ckpt_->save(step, SaveKind::Periodic);
    if (cfg_.train.eval_every <= 0 || step % cfg_.train.eval_every != 0) return false;
    loop_.evaluated_last = true;
    const bool stop_early = evaluate_and_record(step);
    ckpt_->keep_best(step, saved);
    if (stop_early)
      spdlog::info("early stopping at step {}: {} has not improved for {} evaluations (best {:.4f} at step {})", step,
                   tracker_->metric(), tracker_->evals_without_improvement(), tracker_->best().value_or(0),
                   tracker_->best_step());
    return stop_early;
  }

  enum class Next { Go, Signal, EarlyStop };
  // One step (loop_.step advances) and what follows it: the non-finite policy, the record, the stop
  // check, checkpoint and evaluation, an agreed growth. The recovery component hears how far it got.
  Next step_and_after() {
    int64_t& step = loop_.step;
    if (recovery_->record_pending()) record_train(step, recovery_->last_grad_norm());  // a failure interrupted it
    recovery_->begin_step(train_loader_->state());
    dist_->set_step(step);
    const bool log_step = step_is_final(step + 1) || (step + 1) % cfg_.train.log_every == 0;
    loop_.profiler->before_step(step);
    const auto outcome = steps_->run(step, log_step, loop_.times);
    loop_.profiler->after_step(step);
    ++step;
    recovery_->step_ran(step, log_step, outcome.grad_norm);
    if (nonfinite_.after_step(outcome.nonfinite, step, *steps_, *ckpt_, loop_.times)) return Next::Go;  // rolled back
    if (ema_ && !outcome.nonfinite) ema_->after_step(step);  // a skipped step changed no weight
    log_->step_done(step);
    if (log_step) record_train(step, outcome.grad_norm);
    recovery_->recorded();
    if (stop_agreed(step, log_step)) return Next::Signal;
    const bool early = checkpoint_and_evaluate(step);
    if (recovery_->grow_due() && !early) recovery_->grow(step);  // last: a joiner's first collective is the next step's
    return early ? Next::EarlyStop : Next::Go;
  }

  // dist.recovery in_process: a collective that fails in step_and_after regroups the survivors, and
  // the loop goes on from loop_.step (as it was left: the step in flight counts once committed).
  Next step_with_recovery() {
    recovery_->reset_progress();
    try {
      return step_and_after();
    } catch (const dist::DistError& e) {
      if (!dist_->recovery()) throw;
      recover(e.what(), loop_.step);
      return Next::Go;
    }
  }

  int train_loop() {
    run_start_ = Clock::now();
    log_->attempt(attempt_);
    if (step_is_final(start_step_)) {
      spdlog::info("the run is already complete ({} of {} steps); nothing to train", start_step_, total_steps_);
      return kExitOk;
    }
    // (a replacement joined the others mid-run: they are past this check)
    if (!recovery_->joined() && stop_agreed(start_step_, /*log_step=*/true))
      return ckpt_->stop_for_signal(start_step_, start_step_);
    std::string stop_reason = cfg_.train.max_steps > 0 ? "max_steps" : "epochs";
    loop_.step = start_step_;
    loop_.profiler = std::make_unique<obs::StepProfiler>(cfg_.profile.start_step, cfg_.profile.steps,
                                                         dir_.root / "profile", env_.rank, device_.is_cuda(),
                                                         cfg_.profile.record_shapes);
    // a graph is captured on a stream other than the default one: with train.cuda_graphs every step,
    // evaluation and checkpoint of the loop runs on that one stream, in order
    std::optional<device::CudaSideStream> graph_stream;
    if (steps_->graphed()) graph_stream.emplace(device_.index());
    for (;;) {
      try {
        if (stop_reason == "early_stopping" || step_is_final(loop_.step)) return finish(loop_.step, stop_reason);
        const Next next = step_with_recovery();
        if (next == Next::Signal) return ckpt_->stop_for_signal(loop_.step, start_step_);
        if (next == Next::EarlyStop) stop_reason = "early_stopping";
      } catch (const data::DataChanged& e) {  // data.on_change: a checkpoint and exit 65, or the data reopened
        if (const auto rc = on_data_change(e)) return *rc;
      }
    }
  }

  // A data file changed under the run (engine/loop/data_change.hpp): the step in flight is given up;
  // the run stops with a checkpoint of the last completed step (its exit code), or, under
  // data.on_change reload, goes on with the data reopened (nullopt).
  std::optional<int> on_data_change(const data::DataChanged& e) {
    const auto pos = recovery_->resume_point();
    auto fresh = reopen_changed_data(cfg_, e, *train_set_, pos, loop_.step, dist_->active());
    if (!fresh) {
      train_loader_->restore(pos);
      return ckpt_->stop_for_data_change(loop_.step, start_step_, e.what());
    }
    std::tie(train_set_, val_set_) = std::tie(fresh->data.train, fresh->data.val);
    rebuild_world(cfg_.train.grad_accum, fresh->resume_at);
    return std::nullopt;
  }

  // The end of the run: a last evaluation (unless the last step had one), the final checkpoint
  // (never optional: CheckpointFailed), the summary.
  int finish(int64_t step, const std::string& stop_reason) {
    if (!loop_.evaluated_last) evaluate_and_record(step);
    if (ckpt_->save(step, SaveKind::Final)) ckpt_->keep_best(step, /*saved_at_step=*/true);
    dist_->barrier();
    dist_->mark_finished();
    write_summary(step, stop_reason);
    return kExitOk;
  }

  bool step_is_final(int64_t step) const { return step >= total_steps_; }

  void write_summary(int64_t step, const std::string& stop_reason) {
    const double attempt_s = std::chrono::duration<double>(Clock::now() - run_start_).count();
    obs::SummaryRecord s{step, epochs_done(), recovery_->samples_at(step), previous_wall_s_ + attempt_s, attempt_.attempt,
                         attempt_s, stop_reason, tracker_->metric(), tracker_->best(), std::nullopt,
                         model_->num_parameters(), env_.world_size, device_.str(), config::name_of(cfg_.train.precision)};
    if (tracker_->best()) s.best_step = tracker_->best_step();
    log_->summary(s);
    log_done_line(s);
  }

  config::RunConfig cfg_;  // a copy: train.batch_size auto fills in the micro-batch
  dist::LaunchEnv env_;  // a copy: an in-process regroup renumbers the ranks
  const io::RunDir& dir_;
  ResumeOptions resume_;
  int64_t start_step_ = 0;
  torch::Device device_{torch::kCPU};
  Precision precision_ = Precision::Fp32;
  std::unique_ptr<dist::DistContext> dist_;
  TensorParallelRun tp_;  // after dist_, before the model (whose backward calls its communicator)
  double tp_seconds_ = 0;  // tp_.seconds() at the last train record
  std::unique_ptr<DataParallel> parallel_;  // declared after dist_: destroyed before it
  const models::ModelSpec* spec_ = nullptr;  // the family of model.arch
  models::ModelPtr model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<Ema> ema_;  // train.ema, when on
  std::shared_ptr<data::Dataset> train_set_, val_set_;
  bool tokens_ = false;
  std::unique_ptr<data::DataLoader> train_loader_;
  int64_t total_steps_ = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<EarlyStopping> tracker_;
  std::unique_ptr<Evaluator> evaluator_;  // when there is a validation split
  std::unique_ptr<obs::RunLog> log_;
  double flops_per_sample_ = 0, peak_tflops_ = 0;
  std::unique_ptr<StepRunner> steps_;  // after the objects it steps
  NonFinitePolicy nonfinite_{cfg_.train};   // train.nonfinite
  std::unique_ptr<CheckpointManager> ckpt_;  // after the objects it saves and restores
  obs::AttemptRecord attempt_;               // this attempt: number, start step, resumed from
  double clock_offset_s_ = 0;                // the training clock at the checkpoint resumed from
  double previous_wall_s_ = 0;               // wall seconds of the earlier attempts (metrics.jsonl)
  ResumeCheck resume_check_;  // checkpoint.verify_tolerance: the interrupted run's logged losses
  bool warned_no_val_ = false;
  std::unique_ptr<WorldRecovery> recovery_;  // dist.recovery in_process: what changes with the world
  struct {
    int64_t step = 0;
    IntervalTimes times;          // of the interval since the last record
    bool evaluated_last = false;  // the last step was followed by an evaluation
    std::unique_ptr<obs::StepProfiler> profiler;
  } loop_;                        // where the loop stands
  Clock::time_point run_start_;
};

}  // namespace

int run_training(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir,
                 const ResumeOptions& resume) {
  Trainer t(cfg, env, dir, resume);
  return t.run();
}

}  // namespace trainer::engine
