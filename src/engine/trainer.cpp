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
#include "engine/data_change.hpp"
#include "engine/data_parallel.hpp"
#include "engine/early_stopping.hpp"
#include "engine/ema.hpp"
#include "engine/evaluator.hpp"
#include "engine/finetune.hpp"
#include "engine/graphed_step.hpp"
#include "engine/world_change.hpp"
#include "engine/loss_scaler.hpp"
#include "engine/nonfinite_policy.hpp"
#include "engine/peer_state.hpp"
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
    dist_ = dist::DistContext::create(env_, cfg_.dist, device_, config_hash_ = config::config_hash(cfg_));

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
    if (val_set_) evaluator_ = make_evaluator();
    total_steps_ = total_optimizer_steps(cfg_.train, train_loader_->batches_per_epoch());
    samples_per_step_ = cfg_.train.batch_size * cfg_.train.grad_accum * env_.world_size;

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
                           train_loader_->batches_per_epoch()});
  }

  data::LoaderOptions loader_options(bool train) const { return run_loader_options(cfg_, env_, device_, train); }

  std::unique_ptr<Evaluator> make_evaluator() {
    EvalSetup e{loader_options(/*train=*/false), precision_,          device_, tokens_, cfg_.model.channels_last,
                cfg_.train.eval_steps,           config::bytes_per_token(cfg_.data)};
    return std::make_unique<Evaluator>(val_set_, e, dist_.get(), env_.world_size);
  }

  std::unique_ptr<StepRunner> make_step_runner() {
    return std::make_unique<StepRunner>(
        StepParts{*model_, params_, *train_loader_, *optimizer_, *scaler_,
                  [this](int64_t step) { return schedule_->lr_at(step); }, *parallel_},
        StepSettings{cfg_.train.grad_accum, cfg_.train.grad_clip, cfg_.train.nonfinite, precision_, device_, tokens_,
                     cfg_.model.channels_last, env_.rank, cfg_.train.label_smoothing, cfg_.data.mixup, cfg_.data.cutmix,
                     cfg_.model.num_classes, cfg_.run.seed});
  }

  // --- the world size changes: dist.recovery in_process (engine/world_change.hpp) ---------------
  // A collective failed. `step_done`: the step in flight passed its commit vote (every rank stepped),
  // else it is abandoned (its partial gradients dropped, the loader back where the step began).
  void regroup(const std::string& why, int64_t step, bool step_done) {
    regroup_ = regroup_survivors(*dist_, cfg_.train, samples_per_step_, step, why);
    rebuild_world(step, regroup_->grad_accum, step_done ? train_loader_->state() : loader_at_step_start_);
    if (regroup_->group.old_rank != 0 && env_.rank == 0) {  // rank 0 was lost: this rank writes now
      log_ = std::make_unique<obs::RunLog>(run_log_options(cfg_.log, /*primary=*/true, dir_, total_steps_));
      log_->skip_records_until(obs::read_history(dir_.metrics_file()).last_step);  // what rank 0 wrote
      ckpt_->become_writer();
    }
  }
  // Every rank agreed at this step boundary to admit the replacements that wait (stop_agreed).
  void grow(int64_t step) {
    grow_pending_ = false;
    const auto g = dist_->grow();
    const int64_t accum = accumulation_for(samples_per_step_, cfg_.train.batch_size, g.world, cfg_.train.grad_accum);
    const auto shared = share_run_state(*dist_, cfg_, config_hash_, objects(), position(step), accum, false);
    rebuild_world(step, shared.grad_accum, train_loader_->state());
    log_grown(g, dist_->member_id(), step, cfg_.train, /*joined=*/false);
  }
  // A replacement rank (TRAINER_JOIN, from `trainer launch`): joins the running group and takes
  // rank 0's state from the process group, not from a checkpoint.
  bool join_running_group() {
    make_checkpoint_manager();
    const auto joined = dist_->join([] { return stop_requested(); });
    if (!joined) return log_not_joined(), false;
    const auto shared = share_run_state(*dist_, cfg_, config_hash_, objects(), {}, 0, /*restore=*/true);
    start_step_ = samples_from_step_ = shared.pos.step;
    clock_offset_s_ = shared.pos.time_s;
    rebuild_world(start_step_, shared.grad_accum, shared.pos.loader);
    log_grown(*joined, dist_->member_id(), start_step_, cfg_.train, /*joined=*/true);
    return joined_ = true;
  }
  // What depends on the world size, rebuilt for the current group: the strategy (whose prepare also
  // checks that every rank holds the same weights), the loader at the same global position
  // re-sharded, the evaluator, the step runner (keeping the interval's loss).
  void rebuild_world(int64_t step, int64_t grad_accum, const data::LoaderState& pos) {
    auto interval = steps_->interval();
    samples_before_ += (step - samples_from_step_) * samples_per_step_;
    samples_from_step_ = step;
    env_.rank = dist_->rank();
    env_.world_size = dist_->world_size();
    cfg_.train.grad_accum = grad_accum;
    for (auto& p : params_) p.mutable_grad().reset();
    steps_.reset();  // it refers to the strategy and the loader replaced here
    parallel_ = make_data_parallel(*dist_, cfg_.dist);
    parallel_->prepare(*model_, params_);
    train_loader_ = std::make_unique<data::DataLoader>(train_set_, loader_options(/*train=*/true));
    train_loader_->restore(pos);
    if (val_set_) evaluator_ = make_evaluator();
    samples_per_step_ = cfg_.train.batch_size * cfg_.train.grad_accum * env_.world_size;
    steps_ = make_step_runner();
    steps_->take_over(interval);
    ckpt_->set_parallel(parallel_.get());
    if (ema_) ema_->set_parallel(parallel_.get());  // it held the strategy destroyed above
  }
  int64_t samples_at(int64_t step) const { return samples_before_ + (step - samples_from_step_) * samples_per_step_; }

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
    const double per_epoch = static_cast<double>(train_loader_->batches_per_epoch() * cfg_.train.batch_size * env_.world_size);
    return static_cast<double>(st.epoch) + (per_epoch > 0 ? static_cast<double>(st.samples_consumed) / per_epoch : 0.0);
  }

  void record_train(int64_t step, const torch::Tensor& norm, IntervalTimes& times) {
    if (steps_->loss_count() == 0) {  // every step of the interval was skipped (the same on every rank)
      times = IntervalTimes{};
      return;
    }
    const double local_loss =
        steps_->loss_sum().item<double>() / static_cast<double>(steps_->loss_count());  // the log step's host sync
    obs::TrainRecord r{.step = step, .epoch = epochs_done(), .time_s = clock_s(), .samples = samples_at(step),
                       .loss = dist_->all_reduce_mean(local_loss), .lr = schedule_->lr_at(step - 1)};
    r.world_size = last_step_world_;  // a record redone after a regroup: the world that ran the step
    if (!std::isfinite(r.loss) && !scaler_->enabled()) throw_nonfinite_loss(r.loss, local_loss, step, env_);
    resume_check_.compare(step, r.loss);
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
  RunPosition position(int64_t step) const { return {step, train_loader_->state(), env_.world_size, clock_s()}; }
  void make_checkpoint_manager() {
    ckpt_ = std::make_unique<CheckpointManager>(cfg_, env_, dist_.get(), dir_.root, objects(),
                                                [this](int64_t step) { return position(step); });
  }
  void resume() {
    make_checkpoint_manager();
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
    if (pos.world_size > 0 && pos.world_size != env_.world_size) {
      const int64_t total = steps_at_new_world_size(cfg_.train, pos, env_.world_size, train_loader_->batches_per_epoch(),
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
  // Signals only set a flag; every rank acts on it at the same step boundary. With several ranks
  // agreeing costs a collective and a host sync, so they agree only on log steps and every
  // kStopCheckEvery steps (the same steps on every rank), never on each step of the hot path.
  // The same all-reduce tells whether rank 0 proposed to admit waiting replacements (grow_pending_).
  bool stop_agreed(int64_t step, bool log_step) {
    const bool check = log_step || step % kStopCheckEvery == 0;
    if (!dist_->active()) {  // one process: every step, for free (a regrouped one still admits replacements)
      grow_pending_ = check && !step_is_final(step) && dist_->propose_growth();
      return stop_requested();
    }
    if (!check) return false;
    const auto flags = dist_->any_of({stop_requested(), !step_is_final(step) && dist_->propose_growth()});
    grow_pending_ = flags[1];
    return flags[0];
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

  enum class Next { Go, Signal, EarlyStop };
  // One step and what follows it: the non-finite policy, the record, the stop check, checkpoint and
  // evaluation. `progress_` says how far it got (for a regroup after a failure).
  Next step_and_after(int64_t& step, IntervalTimes& times, obs::StepProfiler& profiler, bool& evaluated_last) {
    if (pending_record_) record_train(step, last_norm_, times);  // the record a failure interrupted
    pending_record_ = false;
    dist_->set_step(step);
    const bool log_step = step_is_final(step + 1) || (step + 1) % cfg_.train.log_every == 0;
    loader_at_step_start_ = train_loader_->state();  // a regroup or a data change redoes the step from here
    profiler.before_step(step);
    auto outcome = steps_->run(step, log_step, times);
    profiler.after_step(step);
    ++step;
    progress_ = {true, !log_step};
    last_step_world_ = env_.world_size;
    if (regroup_) log_first_step_after_regroup(*regroup_, step), regroup_.reset();
    if (nonfinite_.after_step(outcome.nonfinite, step, *steps_, *ckpt_, times)) return Next::Go;  // rolled back
    if (ema_ && !outcome.nonfinite) ema_->after_step(step);                 // a skipped step changed no weight
    log_->step_done(step);
    last_norm_ = outcome.grad_norm;
    if (log_step) record_train(step, outcome.grad_norm, times);
    progress_.recorded = true;
    if (stop_agreed(step, log_step)) return Next::Signal;
    const bool early = checkpoint_and_evaluate(step, evaluated_last);
    if (grow_pending_ && !early) grow(step);  // last: a joiner's first collective is the next step's
    return early ? Next::EarlyStop : Next::Go;
  }

  // dist.recovery in_process: a collective that fails in `body` regroups the survivors, and the loop
  // goes on from `step` (as `body` left it: the step in flight counts once committed).
  template <class Body>
  Next with_recovery(const int64_t& step, Body&& body) {
    progress_ = {false, true};
    try {
      return body();
    } catch (const dist::DistError& e) {
      if (!dist_->recovery()) throw;
      const auto p = progress_;
      regroup(e.what(), step, p.step_done);
      pending_record_ = pending_record_ || !p.recorded;
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
    if (!joined_ && stop_agreed(start_step_, /*log_step=*/true))
      return ckpt_->stop_for_signal(start_step_, start_step_);
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
    for (Next next = Next::Go;; next = Next::Go) {
      try {
        if (stop_reason == "early_stopping" || step_is_final(step)) return finish(step, stop_reason, evaluated_last);
        next = with_recovery(step, [&] { return step_and_after(step, times, profiler, evaluated_last); });
      } catch (const data::DataChanged& e) {  // data.on_change (engine/data_change.hpp): redo the step
        const auto pos = progress_.step_done ? train_loader_->state() : loader_at_step_start_;
        auto fresh = reopen_changed_data(cfg_, e, *train_set_, pos, step, dist_->active());
        if (!fresh) return train_loader_->restore(pos), ckpt_->stop_for_data_change(step, start_step_, e.what());
        std::tie(train_set_, val_set_) = std::tie(fresh->data.train, fresh->data.val);
        rebuild_world(step, cfg_.train.grad_accum, fresh->resume_at);
      }
      if (next == Next::Signal) return ckpt_->stop_for_signal(step, start_step_);
      if (next == Next::EarlyStop) stop_reason = "early_stopping";
    }
  }

  // The end of the run: a last evaluation (unless the last step had one), the final checkpoint
  // (never optional: CheckpointFailed), the summary.
  int finish(int64_t step, const std::string& stop_reason, bool evaluated_last) {
    if (!evaluated_last) evaluate_and_record(step);
    if (ckpt_->save(step, SaveKind::Final)) ckpt_->keep_best(step, /*saved_at_step=*/true);
    dist_->barrier();
    dist_->mark_finished();
    write_summary(step, stop_reason);
    return kExitOk;
  }

  bool step_is_final(int64_t step) const { return step >= total_steps_; }

  void write_summary(int64_t step, const std::string& stop_reason) {
    const double attempt_s = std::chrono::duration<double>(Clock::now() - run_start_).count();
    obs::SummaryRecord s{step, epochs_done(), samples_at(step), previous_wall_s_ + attempt_s, attempt_.attempt,
                         attempt_s, stop_reason, tracker_->metric(), tracker_->best(), std::nullopt,
                         model_->num_parameters(), env_.world_size, device_.str(), config::name_of(cfg_.train.precision)};
    if (tracker_->best()) s.best_step = tracker_->best_step();
    log_->summary(s);
    log_done_line(s);
  }

  config::RunConfig cfg_;  // a copy: train.batch_size auto fills in the micro-batch
  std::string config_hash_;  // of the config as loaded (a regroup changes cfg_.train.grad_accum)
  dist::LaunchEnv env_;  // a copy: an in-process regroup renumbers the ranks
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
  NonFinitePolicy nonfinite_{cfg_.train};   // train.nonfinite
  std::unique_ptr<CheckpointManager> ckpt_;  // after the objects it saves and restores
  obs::AttemptRecord attempt_;               // this attempt: number, start step, resumed from
  double clock_offset_s_ = 0;                // the training clock at the checkpoint resumed from
  double previous_wall_s_ = 0;               // wall seconds of the earlier attempts (metrics.jsonl)
  ResumeCheck resume_check_;  // checkpoint.verify_tolerance: the interrupted run's logged losses
  bool warned_no_val_ = false;
  std::optional<RegroupPlan> regroup_;    // the last in-process regroup, until its first step is done
  data::LoaderState loader_at_step_start_;  // where an abandoned step's micro-batches began
  torch::Tensor last_norm_;                 // the last step's gradient norm (a record redone after a regroup)
  bool pending_record_ = false;             // a failure interrupted the record of the last step
  bool grow_pending_ = false;               // the ranks agreed to admit replacements at this boundary
  bool joined_ = false;                     // this process is a replacement that joined mid-run
  struct {
    bool step_done = false, recorded = true;
  } progress_;                              // how far the step in flight got
  int64_t last_step_world_ = 1;             // the ranks that ran the last step
  int64_t samples_before_ = 0, samples_from_step_ = 0;  // samples of the steps before the last regroup
  Clock::time_point run_start_;
};

}  // namespace

int run_training(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir,
                 const ResumeOptions& resume) {
  Trainer t(cfg, env, dir, resume);
  return t.run();
}

}  // namespace trainer::engine
