#include "engine/loop/trainer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
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
#include "engine/checkpoint/stop_signal.hpp"
#include "engine/eval/early_stopping.hpp"
#include "engine/eval/evaluator.hpp"
#include "engine/loop/data_change.hpp"
#include "engine/loop/nonfinite_policy.hpp"
#include "engine/loop/run_evaluation.hpp"
#include "engine/loop/run_recorder.hpp"
#include "engine/loop/tp_run.hpp"
#include "engine/loop/train_record.hpp"
#include "engine/loop/world_recovery.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "engine/optim/optim.hpp"
#include "engine/optim/precision.hpp"
#include "engine/optim/schedule.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "engine/startup/finetune.hpp"
#include "engine/startup/startup_planner.hpp"
#include "engine/step/ema.hpp"
#include "engine/step/graphed_step.hpp"
#include "engine/step/step_runner.hpp"
#include "models/model.hpp"
#include "obs/history.hpp"
#include "obs/profiler.hpp"

namespace trainer::engine {
namespace {

class Trainer final : public WorldParts {
 public:
  Trainer(const config::RunConfig& cfg, const dist::LaunchEnv& env, io::RunDir& dir, const ResumeOptions& resume)
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
    // the data first (they draw no random numbers): train.precision auto probes the model on their shapes
    auto datasets = data::create_datasets(cfg_.data, cfg_.model, cfg_.run.seed);
    train_set_ = datasets.train;
    val_set_ = datasets.val;
    tokens_ = train_set_->kind() == data::SampleKind::Tokens;
    if (cfg_.train.precision == config::Precision::Auto) {  // before anything measured in the precision
      const int64_t b = cfg_.train.batch_size > 0 ? cfg_.train.batch_size
                                                  : std::min<int64_t>(16, cfg_.train.global_batch_size / env_.world_size);
      precision_ = planner.resolve_precision(*train_set_, b);
    }
    // a family either times model.attention auto at start (GPT) or decides it itself (ViT)
    if (spec_->attention_probe && cfg_.model.attention == config::Attention::Auto) planner.resolve_attention();
    // seeded above: every rank draws the same weights (a tp rank then keeps its slices); train.freeze applied
    model_ = build_run_model(cfg_, device_, tp_.build_context());
    params_ = unique_parameters(*model_);
    parallel_ = make_parallel();
    const auto memory = parallel_->memory_plan(*model_, cfg_.optim);  // of the whole model: before prepare shards it
    parallel_->prepare(*model_, params_);  // rank 0's weights are the truth (model.init loads later, on every rank)
    if (cfg_.train.ema.decay > 0) ema_ = make_ema(cfg_, *model_, device_, parallel_.get());  // the broadcast weights

    if (cfg_.train.batch_size == 0) planner.choose_micro_batch(*train_set_);
    train_loader_ = std::make_unique<data::DataLoader>(train_set_, loader_options(/*train=*/true));
    total_steps_ = total_optimizer_steps(cfg_.train, train_loader_->batches_per_epoch());
    recovery_ = std::make_unique<WorldRecovery>(*dist_, cfg_, hash, *this);  // once the micro-batch is chosen

    optimizer_ = parallel_->make_optimizer(cfg_.optim, *model_);  // sharded: this rank's pieces only
    schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
    if (cfg_.train.max_steps == 0 && cfg_.schedule.warmup_steps > total_steps_)  // (max_steps: said at load)
      spdlog::warn("schedule.warmup_steps {} is longer than the run ({} steps in train.epochs {}): the schedule clips "
                   "it to {}", cfg_.schedule.warmup_steps, total_steps_, cfg_.train.epochs, total_steps_);
    scaler_ = std::make_unique<LossScaler>(LossScalerConfig{.enabled = precision_ == Precision::Fp16}, device_);
    evaluation_ = std::make_unique<RunEvaluation>(cfg_, spec_->rules.eval_metrics.front());
    if (val_set_) evaluation_->set_evaluator(make_evaluator());

    steps_ = make_step_runner();
    if (cfg_.train.cuda_graphs) steps_->enable_graphs(graph_conditions(cfg_, device_.is_cuda(), precision_, env_.world_size));

    records_ = std::make_unique<RunRecorder>(cfg_, env_, dir_, total_steps_, tp_.size(),
                                             model_->train_flops_per_sample(train_set_->sample_shape()),
                                             peak_tflops_for(cfg_, device_));

    planner.release_startup_memory();
    log_run_start(RunStart{*model_, *train_set_, val_set_.get(), *dist_, env_, device_, cfg_.train, total_steps_,
                           train_loader_->batches_per_epoch(), &memory, data_world()});
  }

  // the ranks of one tp group read the same batches: the loader shards over the data-parallel ranks
  data::LoaderOptions loader_options(bool train) const {
    return run_loader_options(cfg_, tp_.data_env(env_), device_, train);
  }
  std::unique_ptr<DataParallel> make_parallel() {
    auto tp = tp_.make_strategy(*dist_, cfg_.dist);
    return tp ? std::move(tp) : make_data_parallel(*dist_, dist_->world_group(), cfg_.dist);
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
    records_->joined(joined->time_s);
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
    parallel_ = make_parallel();  // over the regrouped world
    parallel_->prepare(*model_, params_);
    train_loader_ = std::make_unique<data::DataLoader>(train_set_, loader_options(/*train=*/true));
    train_loader_->restore(pos);
    evaluation_->set_evaluator(val_set_ ? make_evaluator() : nullptr);
    steps_ = make_step_runner();
    steps_->take_over(interval);
    ckpt_->set_parallel(parallel_.get());
    if (ema_) ema_->set_parallel(parallel_.get());  // it held the strategy destroyed above
  }
  data::LoaderState loader_state() const override { return train_loader_->state(); }
  int64_t last_logged_step() const override { return obs::read_history(dir_.metrics_file()).last_step; }
  // A collective failed in the step at `step` or after it: the survivors go on (a new rank 0 takes
  // over the records rank 0 wrote, TensorBoard, the summary and the checkpoint store).
  void recover(const std::string& why, int64_t step) {
    if (!recovery_->recover(why, step)) return;
    // the dead rank 0's locks (a second run on the folder stays refused); one still held (rank 0 cut
    // off on another host, alive) does not stop the survivors
    try { io::take_writer_locks(cfg_, dir_); }
    catch (const std::exception& e) { spdlog::warn("in-process recovery: {}", e.what()); }
    records_->become_primary();
    ckpt_->become_writer();
  }

  // --- evaluation and records (engine/loop/run_evaluation.hpp, run_recorder.hpp) --------------------
  // true when early stopping asks the run to end
  bool evaluate(int64_t step) {
    dist_->kill_point("eval", step);  // TRAINER_INJECT_KILL (tests): a rank lost during evaluation
    return evaluation_->evaluate(step, records_->epochs_done(*train_loader_), *model_, ema_.get(), *records_);
  }
  void record_train(int64_t step, const torch::Tensor& norm, std::optional<double> recorded_loss = std::nullopt) {
    TrainSources src{*steps_, loop_.times, *train_loader_, *recovery_, *dist_, *scaler_, schedule_->lr_at(step - 1),
                     tokens_ ? train_set_->sample_shape().at(0) : 0, device_};
    if (tp_.active() && loop_.times.steps > 0)  // the tp group's collectives inside the steps of this interval, per step
      src.tp_comm_ms = (tp_.seconds() - std::exchange(tp_seconds_, tp_.seconds())) * 1e3 / static_cast<double>(loop_.times.steps);
    records_->train(step, norm, src, recorded_loss);
  }
  // The record of `step` again on every rank after a regroup interrupted it (world_recovery.hpp).
  void redo_record(int64_t step) {
    if (!recovery_->recorded_here()) return record_train(step, recovery_->last_grad_norm());
    if (!records_->last_local_loss()) return;  // that interval had no loss: no record, on any rank
    if (last_logged_step() >= step) records_->log().skip_records_until(step);  // the writer wrote it (others: no-op)
    record_train(step, recovery_->last_grad_norm(), records_->last_local_loss());
  }

  // --- checkpoints (engine/checkpoint_manager.hpp) ------------------------------------------------
  RunObjects objects() override {
    return RunObjects{*model_, *optimizer_, *scaler_, evaluation_->tracker(), device_, parallel_.get(), ema_.get()};
  }

  // --resume auto|never|PATH: every rank restores the same checkpoint; the resume check then compares
  // the losses of the steps the interrupted run logged after it, and those steps are not logged twice.
  RunPosition position(int64_t step) const override { return {step, train_loader_->state(), data_world(), records_->clock_s()}; }
  void make_checkpoint_manager() {
    ckpt_ = std::make_unique<CheckpointManager>(cfg_, env_, dist_.get(), dir_.root, objects(),
                                                [this](int64_t step) { return position(step); });
  }
  void resume() {
    make_checkpoint_manager();
    records_->read_history();
    const auto resumed = ckpt_->resume(resume_);
    if (!resumed) return start_from_initial_weights();
    const auto& pos = resumed->pos;
    train_loader_->restore(pos.loader);
    start_step_ = pos.step;
    records_->resumed(*resumed);
    if (pos.world_size <= 0 || pos.world_size == data_world()) return;
    const int64_t total = steps_at_new_world_size(cfg_.train, pos, data_world(), train_loader_->batches_per_epoch(),
                                                  start_step_, total_steps_);
    if (total == total_steps_) return;
    total_steps_ = total;
    schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
    records_->set_total_steps(total_steps_);
  }
  // No checkpoint to resume: model.init, if any, on every rank; the EMA starts from those weights.
  void start_from_initial_weights() {
    {
      FullParams whole(parallel_.get(), /*write=*/true);  // dist.sharding full: the weights it changes
      load_initial_weights(*model_, cfg_.model, dir_.root, dist::writes_run_files(env_));  // model.init
    }
    if (ema_) ema_->reset_from_live();
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
    const bool stop_early = evaluate(step);
    ckpt_->keep_best(step, saved);
    if (stop_early) evaluation_->log_early_stop(step);
    return stop_early;
  }

  enum class Next { Go, Signal, EarlyStop };
  // One step (loop_.step advances) and what follows it: the non-finite policy, the record, the stop
  // check, checkpoint and evaluation, an agreed growth. The recovery component hears how far it got.
  Next step_and_after() {
    int64_t& step = loop_.step;
    if (recovery_->record_pending()) redo_record(step);  // a failure interrupted it
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
    records_->log().step_done(step);
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
    records_->start_attempt();
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
        if (stop_reason == "early_stopping" || step_is_final(loop_.step)) {
          if (const auto rc = finish_with_recovery(loop_.step, stop_reason)) return *rc;
          continue;  // a peer failed during the end: the survivors end the run
        }
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
  // What it did before a failure is not done again after a regroup (evaluated_last, final_saved).
  int finish(int64_t step, const std::string& stop_reason) {
    if (!loop_.evaluated_last) evaluate(step);
    loop_.evaluated_last = true;
    if (!loop_.final_saved && ckpt_->save(step, SaveKind::Final)) ckpt_->keep_best(step, /*saved_at_step=*/true);
    loop_.final_saved = true;
    dist_->barrier();
    dist_->mark_finished();
    records_->summary(step, records_->epochs_done(*train_loader_), recovery_->samples_at(step), stop_reason, evaluation_->tracker(),
                      model_->num_parameters(), device_);
    return kExitOk;
  }

  // in_process: a peer lost during the last evaluation or the final save is one more regroup;
  // nullopt: the loop calls this again with the survivors.
  std::optional<int> finish_with_recovery(int64_t step, const std::string& stop_reason) {
    try {
      return finish(step, stop_reason);
    } catch (const dist::DistError& e) {
      if (!dist_->recovery()) throw;
      recover(e.what(), step);
      return std::nullopt;
    }
  }

  bool step_is_final(int64_t step) const { return step >= total_steps_; }

  config::RunConfig cfg_;  // a copy: train.batch_size auto fills in the micro-batch
  dist::LaunchEnv env_;  // a copy: an in-process regroup renumbers the ranks
  io::RunDir& dir_;  // its locks move to this rank when it takes over writing
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
  std::unique_ptr<RunEvaluation> evaluation_;  // the evaluator (with a validation split) and early stopping
  std::unique_ptr<StepRunner> steps_;  // after the objects it steps
  NonFinitePolicy nonfinite_{cfg_.train};   // train.nonfinite
  std::unique_ptr<CheckpointManager> ckpt_;  // after the objects it saves and restores
  std::unique_ptr<RunRecorder> records_;     // the clock, the attempt and the records, rank 0 writing
  std::unique_ptr<WorldRecovery> recovery_;  // dist.recovery in_process: what changes with the world
  struct {
    int64_t step = 0;
    IntervalTimes times;          // of the interval since the last record
    bool evaluated_last = false;  // the last step was followed by an evaluation
    bool final_saved = false;     // the final checkpoint is saved (a regroup after it does not save again)
    std::unique_ptr<obs::StepProfiler> profiler;
  } loop_;                        // where the loop stands
};

}  // namespace

int run_training(const config::RunConfig& cfg, const dist::LaunchEnv& env, io::RunDir& dir,
                 const ResumeOptions& resume) {
  Trainer t(cfg, env, dir, resume);
  return t.run();
}

}  // namespace trainer::engine
