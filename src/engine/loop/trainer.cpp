#include "engine/loop/trainer.hpp"

#include <spdlog/spdlog.h>

#include <exception>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "config/exit_codes.hpp"
#include "config/load.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "device/cuda_graph.hpp"
#include "device/device.hpp"
#include "dist/dist_context.hpp"
#include "engine/checkpoint/checkpoint_manager.hpp"
#include "engine/checkpoint/stop_signal.hpp"
#include "engine/eval/evaluator.hpp"
#include "engine/loop/data_change.hpp"
#include "engine/loop/milestones.hpp"
#include "engine/loop/nonfinite_policy.hpp"
#include "engine/loop/run_evaluation.hpp"
#include "engine/loop/run_recorder.hpp"
#include "engine/loop/start_point.hpp"
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
#include "obs/logging.hpp"
#include "obs/profiler.hpp"

namespace trainer::engine {
namespace {

class Trainer final : public WorldParts {
 public:
  Trainer(const config::RunConfig& cfg, const dist::LaunchEnv& env, io::RunDir& dir, const ResumeOptions& resume)
      : cfg_(cfg), launch_(env), dir_(dir), resume_(resume) {}

  int run() {
    setup();
    if (!dist_->joining()) start();
    install_stop_handlers();
    // The handlers stay until the process exits, however the loop ends: a signal after it (a
    // scheduler's repeated SIGTERM after a stop's checkpoint, a scancel as a finished run tears down)
    // would otherwise kill the process and hide the run's own exit code (0, 74, 75, 65) behind 143.
    struct Ending {
      ~Ending() {
        set_stop_phase(StopPhase::Ending);
        try { inject_stop_signal(kInjectAtEnd); }  // TRAINER_INJECT_SIGNAL=end (tests)
        catch (const std::invalid_argument&) {}     // a bad value: refused at the first step boundary
      }
    } ending;
    // a replacement rank joins the running group (its state comes from rank 0), unless the run ends first
    return dist_->joining() && !join_running_group() ? kExitOk : train_loop();
  }

 private:
  // --- setup -------------------------------------------------------------------------------------
  void setup() {
    const auto proc = configure_process(cfg_, launch_);
    device_ = proc.device;
    precision_ = proc.precision;
    // a single process is a world of one: the same calls, all no-ops
    const std::string hash = config::config_hash(cfg_);  // of the config as loaded (start-up's choices come later)
    dist_ = dist::DistContext::create(launch_, cfg_.dist, device_, hash);
    dist_->set_stop_query([] { return stop_signal_name(); });  // a stop stalled on a peer is explained
    tp_ = TensorParallelRun(*dist_, cfg_);  // the mesh (pp x dp x tp), the tp group the model is built over, the stages

    StartupPlanner planner(cfg_, launch_, dist_.get(), device_, precision_, dir_.root);
    const models::ModelSpec& spec = models::builtin_models().spec(cfg_.model.arch);  // the family of model.arch
    // the data first (they draw no random numbers): train.precision auto probes the model on their shapes
    auto datasets = open_run_datasets(cfg_, *dist_);  // every rank the same samples (data_change.hpp)
    std::tie(train_set_, val_set_) = std::tie(datasets.train, datasets.val);
    tokens_ = train_set_->kind() == data::SampleKind::Tokens;
    precision_ = planner.resolve_model_choices(*train_set_, spec.attention_probe != nullptr);
    // seeded above: every rank draws the same weights (a tp rank then keeps its slices); train.freeze applied
    auto ctx = tp_.build_context();
    if (auto* pipe = tp_.pipeline()) {  // its stages' parameters alone train here; the others never reach the device
      ctx.keeps_unit = [pipe](size_t unit) { return pipe->holds_unit(static_cast<int64_t>(unit)); };
      ctx.before_move = [pipe](models::Model& m) { pipe->keep_stages(m); };
    }
    model_ = build_run_model(cfg_, device_, ctx);
    params_ = unique_parameters(*model_);
    parallel_ = tp_.make_strategy(*dist_, cfg_.dist);
    const auto memory = parallel_->memory_plan(*model_, cfg_.optim);  // of the whole model: before prepare shards it
    dist_->kill_point("setup", launch_.restart_count);  // TRAINER_INJECT_KILL (tests): a rank lost at start-up
    parallel_->prepare(*model_, params_);  // rank 0's weights are the truth (model.init loads later, on every rank)
    if (cfg_.train.ema.decay > 0) ema_ = make_ema(cfg_, *model_, device_, parallel_.get(), ctx);  // the broadcast weights

    if (cfg_.train.batch_size == 0) {
      planner.choose_micro_batch(*train_set_);
      if (auto* pipe = tp_.pipeline()) pipe->set_batch(cfg_);  // its microbatches: of the chosen micro-batch
    }
    // once the micro-batch is chosen; from here the world is recovery_'s (env(), grad_accum())
    recovery_ = std::make_unique<WorldRecovery>(*dist_, launch_, cfg_, hash, *this, device_);
    train_loader_ = make_train_loader();
    if (cfg_.data.workers < 0) {
      const auto w = device::choose_workers(cfg_.data.workers, device_.is_cuda(), env().local_world_size);
      spdlog::info("data.workers auto: {} ({})", w.workers, w.why);
    }
    total_steps_ = total_optimizer_steps(cfg_.train, train_loader_->batches_per_epoch());

    optimizer_ = parallel_->make_optimizer(cfg_.optim, *model_);  // sharded: this rank's pieces only
    schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
    warn_if_warmup_clipped(cfg_, total_steps_);
    scaler_ = std::make_unique<LossScaler>(run_loss_scaler_config(precision_ == Precision::Fp16), device_);
    evaluation_ = std::make_unique<RunEvaluation>(cfg_, spec.rules.eval_metrics.front());
    if (val_set_) evaluation_->set_evaluator(make_evaluator());

    steps_ = make_step_runner();
    if (cfg_.train.cuda_graphs) steps_->enable_graphs(graph_conditions(cfg_, device_.is_cuda(), precision_, env().world_size));

    records_ = std::make_unique<RunRecorder>(cfg_, env(), dir_, total_steps_, tp_.size() * cfg_.dist.pipeline_parallel,
                                             model_->train_flops_per_sample(train_set_->sample_shape()),
                                             peak_tflops_for(cfg_, device_));

    planner.release_startup_memory();
    log_run_start(RunStart{*model_, *train_set_, val_set_.get(), *dist_, env(), device_, cfg_.train, total_steps_,
                           train_loader_->batches_per_epoch(), &memory, data_world()});
    ckpt_ = std::make_unique<CheckpointManager>(cfg_, env(), dist_.get(), dir_.root, objects(),
                                                [this](int64_t step) { return position(step); });
    ckpt_->set_interval_access({[this] { return steps_->interval(); },
                                [this](const StepRunner::Interval& i) { steps_->take_over(i); }});
  }

  // the current world (a regroup renumbers it)
  const dist::LaunchEnv& env() const { return recovery_->env(); }
  // the ranks of one tp group read the same batches: the loader shards over the data-parallel ranks
  std::unique_ptr<data::DataLoader> make_train_loader() const {
    auto o = run_loader_options(cfg_, tp_.data_env(env()), device_, /*train=*/true);
    o.accumulation = recovery_->grad_accum();  // an epoch is whole steps of this world's global batch
    // several ranks look at their files at the boundary vote only: the loader's own look inside the
    // next step would find a change made between the vote and that step alone (RELIABILITY.md)
    o.look_at_epoch_start = !dist_->active();
    return std::make_unique<data::DataLoader>(train_set_, o);
  }
  int64_t data_world() const { return tp_.data_env(env()).world_size; }

  std::unique_ptr<Evaluator> make_evaluator() {  // the tp ranks of a group score the same batches
    auto setup = run_eval_setup(cfg_, tp_.data_env(env()), precision_, device_, tokens_);
    setup.loader.look_at_epoch_start = !dist_->active();  // as the training loader's (make_train_loader)
    if (auto* pipe = tp_.pipeline())  // through the stages; every rank gets the last stage's output
      setup.forward = [this, pipe](models::Model& m, const torch::Tensor& x) {
        // dist.sharding full: the stages' units whole (the last stage's head reads the first unit's wte)
        FullParams whole(parallel_.get(), /*write=*/false);
        return pipe->forward(m, x);
      };
    return std::make_unique<Evaluator>(val_set_, std::move(setup), dist_.get(), data_world());
  }

  std::unique_ptr<StepRunner> make_step_runner() {
    return std::make_unique<StepRunner>(
        StepParts{*model_, params_, *train_loader_, *optimizer_, *scaler_,
                  [this](int64_t step) { return schedule_->lr_at(step); }, *parallel_, tp_.pipeline()},
        run_step_settings(cfg_, precision_, device_, tokens_, recovery_->grad_accum(), env().rank,
                          tp_.data_env(env()).rank, data_world()));
  }

  // --- the world size changes: dist.recovery in_process (engine/world_recovery.hpp) -------------
  // A replacement rank (TRAINER_JOIN, from `trainer launch`): joins the running group and takes
  // rank 0's state from the process group, not from a checkpoint.
  bool join_running_group() {
    const auto joined = recovery_->join();
    if (!joined) return false;
    start_step_ = joined->step;
    records_->joined(joined->time_s);
    return true;
  }
  // WorldParts: what depends on the world size, rebuilt for the current group.
  void rebuild_world(const data::LoaderState& pos) override {
    auto interval = steps_->interval();
    for (auto& p : params_) p.mutable_grad().reset();
    steps_.reset();  // it refers to the strategy and the loader replaced here
    parallel_ = tp_.make_strategy(*dist_, cfg_.dist);  // over the regrouped world
    parallel_->prepare(*model_, params_);
    train_loader_ = make_train_loader();
    train_loader_->restore(pos);
    evaluation_->set_evaluator(val_set_ ? make_evaluator() : nullptr);
    steps_ = make_step_runner();
    steps_->take_over(interval);
    ckpt_->set_parallel(parallel_.get());
    if (ema_) ema_->set_parallel(parallel_.get());  // it held the strategy destroyed above
  }
  data::LoaderState loader_state() const override { return train_loader_->state(); }
  int64_t last_logged_step() const override { return obs::read_history(dir_.metrics_file()).last_step; }
  // --- evaluation and records (engine/loop/run_evaluation.hpp, run_recorder.hpp) --------------------
  // true when early stopping asks the run to end
  bool evaluate(int64_t step) {
    dist_->kill_point("eval", step);  // TRAINER_INJECT_KILL (tests): a rank lost during evaluation
    if (evaluation_->can_evaluate()) parallel_->sync_buffers(*model_);  // every rank scores with rank 0's
    return evaluation_->evaluate(step, records_->epochs_done(*train_loader_), *model_, ema_.get(), *records_);
  }
  // What the records of `step` read, as the run stands (a regroup rebuilds these parts).
  RecordSources record_sources(int64_t step) {
    return {*steps_, loop_.times, *train_loader_, *recovery_, *dist_, *scaler_, schedule_->lr_at(step - 1),
            tokens_ ? train_set_->sample_shape().at(0) : 0, device_,
            tp_.active() ? std::optional<double>(tp_.seconds()) : std::nullopt,
            tp_.pipeline() ? std::optional<double>(tp_.pipeline()->wait_seconds()) : std::nullopt,
            tp_.pipeline() ? std::optional<int64_t>(tp_.pipeline()->activation_peak_bytes()) : std::nullopt};
  }

  // --- checkpoints (engine/checkpoint_manager.hpp) ------------------------------------------------
  RunObjects objects() override {
    return RunObjects{*model_,          *optimizer_, *scaler_, evaluation_->tracker(), device_,
                      parallel_.get(), ema_.get(), data::record_of(*train_set_)};
  }

  RunPosition position(int64_t step) const override {
    RunPosition p{step, train_loader_->state(), data_world(), records_->clock_s(), records_->records_lost()};
    p.samples = recovery_->samples_at(step);  // over every world size that ran them
    p.total_steps = total_steps_;
    return p;
  }
  // --resume auto|never|PATH, or model.init on a fresh start (engine/loop/start_point.hpp)
  bool resume() {
    start_owed_ = true;  // until it completes
    auto cfg = cfg_;
    cfg.train.grad_accum = recovery_->grad_accum();  // this world's (a regroup at start-up changed it)
    const auto start = resume_or_start(StartParts{*ckpt_, *records_, *train_loader_, *model_, parallel_.get(), ema_.get()},
                                       resume_, cfg, dir_.root, dist::writes_run_files(env()), data_world(), total_steps_);
    start_step_ = start.step;
    if (start.samples >= 0) recovery_->resumed_at(start.step, start.samples);
    if (start.total_steps != total_steps_) {  // a resume on another number of ranks: the schedule over the new length
      total_steps_ = start.total_steps;
      schedule_ = std::make_unique<LrSchedule>(cfg_.schedule, cfg_.optim.lr, total_steps_);
    }
    start_owed_ = false;
    return true;
  }

  // --- the loop ----------------------------------------------------------------------------------
  enum class Next { Go, Signal, EarlyStop, DataChanged };
  // Signals only set a flag, and a rank's look at its data files is its own: every rank acts on them
  // at the same step boundary (WorldRecovery::agree_stop). A change agreed is kept in agreed_change_.
  Next boundary_vote(int64_t step, bool log_step) {
    inject_stop_signal(step);  // TRAINER_INJECT_SIGNAL (tests, drills): a preemption at this boundary
    inject_crash(step);        // TRAINER_INJECT_CRASH (tests): a segfault at this boundary
    const auto b = recovery_->agree_stop(step, log_step, step_is_final(step),
                                         train_loader_->check_due(recovery_->grad_accum()),
                                         [this] { return look_at_files(*train_set_, val_set_.get()); });
    agreed_change_ = b.data_change;
    if (!agreed_change_.empty()) return Next::DataChanged;
    return b.stop ? Next::Signal : Next::Go;
  }

  // One step (loop_.step advances) and what follows it: the non-finite policy, the record, the stop
  // check, checkpoint and evaluation, an agreed growth. The recovery component hears how far it got.
  Next step_and_after() {
    int64_t& step = loop_.step;
    redo_record(step);
    recovery_->begin_step(train_loader_->state());
    dist_->set_step(step);
    const bool log_step = step_is_final(step + 1) || (step + 1) % cfg_.train.log_every == 0;
    loop_.profiler->before_step(step);
    const auto outcome = steps_->run(step, log_step, loop_.times);
    loop_.profiler->after_step(step);
    ++step;
    recovery_->step_ran(step, log_step, outcome.grad_norm);
    if (nonfinite_.after_step(outcome.nonfinite, step, *steps_, *ckpt_, loop_.times)) return Next::Go;  // rolled back
    if (ema_ && !outcome.nonfinite) ema_->after_step(step, total_steps_);  // a skipped step changed no weight
    records_->log().step_done(step);
    if (log_step) records_->train(step, outcome.grad_norm, record_sources(step));
    recovery_->recorded(log_step);
    if (const Next n = boundary_vote(step, log_step); n != Next::Go) return n;
    return milestones_after(step);
  }

  // A failure interrupted the record of `step`: every rank writes it again, before anything else
  void redo_record(int64_t step) {
    if (!recovery_->record_pending()) return;
    records_->redo_train(step, record_sources(step));
    recovery_->record_redone();
  }
  // The periodic save and evaluation due after `step`, then an agreed growth; also after a data reload
  // agreed at that step's boundary (the reload does not skip them).
  Next milestones_after(int64_t step) {
    const bool early = milestones_.after_step(step, step_is_final(step), *ckpt_, loop_.times);  // save, evaluation
    if (early) evaluation_->log_early_stop(step);
    if (recovery_->grow_due() && !early) recovery_->grow(step);  // last: a joiner's first collective is the next step's
    milestones_done_ = step;
    return early ? Next::EarlyStop : Next::Go;
  }

  // dist.recovery in_process: a collective that fails in `f` (a step and what follows it, the end of
  // the run) regroups the survivors and the loop goes on from loop_.step as it was left, the step in
  // flight counted once committed (nullopt); without in-process recovery the failure ends the run.
  template <class F>
  auto recovering(F&& f) -> std::optional<decltype(f())> {
    try {
      return f();
    } catch (const dist::DistError& e) {
      if (!dist_->recovery()) throw;
      // a peer that stopped for changed data (its note in the store) is not a lost peer: train_loop's
      // handler stops this rank too, exit 65, instead of regrouping without it
      if (!dist_->peer_note().empty()) throw;
      // the committed step's save and evaluation as the new writer sees it; the start as any survivor
      WorldRecovery::Owed owed{milestones_left(), start_owed_};
      if (recovery_->recover(e.what(), loop_.step, owed)) take_over_writing(cfg_, dir_, *records_, *ckpt_);
      std::tie(milestones_owed_, start_owed_) = std::tie(owed.milestones, owed.start);
      if (!milestones_owed_) milestones_done_ = std::max(milestones_done_, loop_.step);
      return std::nullopt;
    }
  }

  // `f` until it completes: a rank lost in it (in_process), the survivors make it again (a vote, a save)
  template <class F>
  auto until_recovered(F&& f) {
    for (;;)
      if (auto r = recovering(f)) return *r;
  }

  // Where the loop starts; armed, as built: a rank lost from here on is a regroup (in_process), not a failure
  void start() {
    dist_->arm_recovery();
    recovery_->begin_step(train_loader_->state());  // a regroup puts the loader back here first
    until_recovered([this] { return resume(); });
  }
  int train_loop() {
    std::string stop_reason = cfg_.train.max_steps > 0 ? "max_steps" : "epochs";
    // no attempt record when there is nothing to do: the run's records still end with its summary
    if (run_already_complete(start_step_, total_steps_, recovery_->joined(), *evaluation_))
      return records_->report_lost_records(/*already_complete=*/true) ? kExitFailure : kExitOk;
    records_->start_attempt();
    loop_.step = start_step_;
    // (a replacement joined the others mid-run: they are past this check)
    if (!recovery_->joined()) {
      recovery_->begin_step(train_loader_->state());  // a rank lost in the start's vote: the loader stays
      const Next first = until_recovered([this] {  // a survivor lost its start: every one looks again
        if (start_owed_) resume();
        return boundary_vote(start_step_, /*log_step=*/true);
      });
      if (first == Next::Signal) return until_recovered([this] { return ckpt_->stop_for_signal(start_step_, start_step_); });
      if (first == Next::DataChanged)
        if (const auto rc = on_data_change(agreed_change_, train_loader_->state())) return *rc;
      // a stop signal's checkpoint at an evaluation step was saved before the evaluation: made now
      if (start_step_ > 0 && !step_is_final(start_step_) &&
          until_recovered([this] { return milestones_.at_resume(start_step_, *ckpt_); })) {
        evaluation_->log_early_stop(start_step_);
        stop_reason = "early_stopping";
      }
    }
    set_stop_phase(StopPhase::Training);  // a signal from here on is saved at a step boundary
    loop_.profiler = std::make_unique<obs::StepProfiler>(cfg_.profile.start_step, cfg_.profile.steps,
                                                         dir_.root / "profile", env().rank, device_.is_cuda(),
                                                         cfg_.profile.record_shapes);
    // a graph is captured on a stream other than the default one: with train.cuda_graphs every step,
    // evaluation and checkpoint of the loop runs on that one stream, in order
    std::optional<device::CudaSideStream> graph_stream;
    if (steps_->graphed()) graph_stream.emplace(device_.index());
    for (;;) {
      try {
        if (stop_reason == "early_stopping" || step_is_final(loop_.step)) {
          if (const auto rc = recovering([&] { return finish(loop_.step, stop_reason); })) return *rc;
          continue;  // a peer failed during the end: the survivors end the run
        }
        if (std::exchange(milestones_owed_, false)) {
          const auto owed = [this] {
            redo_record(loop_.step);  // first: the save holds the interval it clears
            return milestones_after(loop_.step);
          };
          if (recovering(owed).value_or(Next::Go) == Next::EarlyStop)
            stop_reason = "early_stopping";
          continue;
        }
        recovery_->reset_progress();
        const Next next = recovering([this] { return step_and_after(); }).value_or(Next::Go);
        if (next == Next::Signal) return until_recovered([this] { return ckpt_->stop_for_signal(loop_.step, start_step_); });
        if (next == Next::EarlyStop) stop_reason = "early_stopping";
        if (next == Next::DataChanged) {  // agreed at the boundary: a checkpoint and exit 65, or the data reopened
          if (const auto rc = on_data_change(agreed_change_, train_loader_->state())) return *rc;
          // reopened: the save and evaluation due at this step still run (on the reopened data)
          if (recovering([this] { return milestones_after(loop_.step); }).value_or(Next::Go) == Next::EarlyStop)
            stop_reason = "early_stopping";
        }
      } catch (const data::DataChanged& e) {  // inside the step: one process gives it up; several ranks cannot
        if (dist_->active()) return stop_alone_for_data_change(*dist_, e.what(), loop_.step);
        if (const auto rc = on_data_change(e.what(), recovery_->give_up_step())) return *rc;
        // found after the step, by its save or evaluation (the validation split read the changed file):
        // they run again on the reopened data, as after a change agreed at the boundary
        if (milestones_left() && milestones_after(loop_.step) == Next::EarlyStop)
          stop_reason = "early_stopping";
      } catch (const dist::DistError& e) {  // (not recovered in process) a peer may have stopped for changed data
        if (const auto rc = stop_after_peer_data_change(*dist_, e.what(), loop_.step)) return *rc;
        throw;
      }
    }
  }

  // A data file changed under the run, agreed by every rank (engine/loop/data_change.hpp); `pos`: where
  // the last completed step left the loader (a step in flight is given up). The run stops with a
  // checkpoint of that step (its exit code), or, under data.on_change reload, goes on with the data
  // reopened (nullopt).
  std::optional<int> on_data_change(const std::string& what, const data::LoaderState& pos) {
    auto fresh = reopen_changed_data(cfg_, what, *train_set_, pos, loop_.step, *dist_);
    if (!fresh) {
      train_loader_->restore(pos);
      return ckpt_->stop_for_data_change(loop_.step, start_step_, what);
    }
    std::tie(train_set_, val_set_) = std::tie(fresh->data.train, fresh->data.val);
    rebuild_data(fresh->resume_at);
    return std::nullopt;
  }

  // After a reload: the parts that read the data (the loader at `pos`, the evaluator, the step runner
  // with the interval's loss). The strategy and the optimizer are the world's: they stay. A step
  // given up in one process leaves partial gradients; several ranks agreed at a boundary, after the
  // step's zero_grad (and a sharded strategy's gradient views must stay).
  void rebuild_data(const data::LoaderState& pos) {
    if (!dist_->active())
      for (auto& p : params_) p.mutable_grad().reset();
    auto interval = steps_->interval();
    steps_.reset();  // it refers to the loader replaced here
    train_loader_ = make_train_loader();
    train_loader_->restore(pos);
    evaluation_->set_evaluator(val_set_ ? make_evaluator() : nullptr);
    steps_ = make_step_runner();
    steps_->take_over(interval);
  }

  // The end of the run: the last evaluation and the final checkpoint (each once, a regroup during the
  // end included: engine/loop/milestones.hpp), the summary.
  int finish(int64_t step, const std::string& stop_reason) {
    redo_record(step);  // a rank lost between the last step's commit and its record (found from outside)
    milestones_.at_end(step, *ckpt_);
    if (auto* pipe = tp_.pipeline()) {  // the tied copies took the same steps
      FullParams whole(parallel_.get(), /*write=*/false);  // dist.sharding full: the copies, whole
      pipe->check_tied(*model_);
    }
    dist_->barrier();
    dist_->mark_finished();
    records_->summary(step, stop_reason, record_sources(step), evaluation_->tracker(), model_->global_num_parameters());
    // the weights are saved, but what a sweep or a report reads of the run is not whole: not exit 0
    return records_->report_lost_records() ? kExitFailure : kExitOk;
  }

  bool step_is_final(int64_t step) const { return step >= total_steps_; }
  bool milestones_left() const { return milestones_done_ < loop_.step && loop_.step > start_step_ && !step_is_final(loop_.step); }

  config::RunConfig cfg_;  // a copy: train.batch_size auto fills in the micro-batch
  const dist::LaunchEnv& launch_;  // as launched: start-up's; the current world's is env()
  io::RunDir& dir_;  // its locks move to this rank when it takes over writing
  ResumeOptions resume_;
  int64_t start_step_ = 0;
  torch::Device device_{torch::kCPU};
  Precision precision_ = Precision::Fp32;
  std::unique_ptr<dist::DistContext> dist_;
  TensorParallelRun tp_;  // after dist_, before the model (whose backward calls its communicator)
  std::unique_ptr<WorldRecovery> recovery_;  // dist.recovery in_process: what changes with the world
  std::unique_ptr<DataParallel> parallel_;  // declared after dist_: destroyed before it
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
  Milestones milestones_{cfg_, [this](int64_t step) { return evaluate(step); },  // periodic and final saves, evaluations
                         [this] { return evaluation_->tracker().evaluated_step(); }};
  std::unique_ptr<CheckpointManager> ckpt_;  // after the objects it saves and restores
  std::unique_ptr<RunRecorder> records_;     // the clock, the attempt and the records, rank 0 writing
  std::string agreed_change_;  // the data change the ranks agreed on at the last boundary ("" none)
  int64_t milestones_done_ = -1;  // the last step whose save and evaluation (milestones_after) completed
  bool milestones_owed_ = false;  // a peer was lost after loop_.step committed, before its milestones
  bool start_owed_ = false;       // resume() has not completed (on some survivor, after a regroup)
  struct {
    int64_t step = 0;
    IntervalTimes times;  // of the interval since the last record
    std::unique_ptr<obs::StepProfiler> profiler;
  } loop_;                // where the loop stands
};

}  // namespace

int run_training(const config::RunConfig& cfg, const dist::LaunchEnv& env, io::RunDir& dir,
                 const ResumeOptions& resume) {
  return Trainer(cfg, env, dir, resume).run();
}

}  // namespace trainer::engine
