#include "engine/loop/run_recorder.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <utility>

#include "obs/logging.hpp"

namespace trainer::engine {

RunRecorder::RunRecorder(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir,
                         int64_t total_steps, int64_t tp_size, double flops_per_sample, double peak_tflops)
    : cfg_(cfg),
      env_(env),
      dir_(dir),
      total_steps_(total_steps),
      tp_size_(tp_size),
      flops_per_sample_(flops_per_sample),
      peak_tflops_(peak_tflops),
      // a replacement that joins a running group writes no run file, whatever its RANK
      log_(std::make_unique<obs::RunLog>(run_log_options(cfg.log, dist::writes_run_files(env), dir, total_steps))) {}

void RunRecorder::become_primary() {
  log_ = std::make_unique<obs::RunLog>(run_log_options(cfg_.log, /*primary=*/true, dir_, total_steps_));
  const auto written = obs::read_history(dir_.metrics_file());  // what rank 0 wrote
  log_->skip_records_until(written.last_train_step, written.last_eval_step);
}

void RunRecorder::set_total_steps(int64_t total) { total_steps_ = total; }

void RunRecorder::read_history() {
  history_ = obs::read_history(dir_.metrics_file());
  attempt_.attempt = history_.attempts + 1;
}

void RunRecorder::resumed(const Resumed& r) {
  const auto& pos = r.pos;
  clock_offset_s_ = pos.time_s;
  lost_before_ = pos.records_lost;
  // the last attempt saved this checkpoint, so it ran at least to its clock (it may have logged no
  // record after its start: a log interval longer than its life)
  if (history_.last_reached_s >= 0 && pos.time_s > history_.last_reached_s) {
    history_.wall_s += pos.time_s - history_.last_reached_s;
    history_.last_reached_s = pos.time_s;
  }
  attempt_.start_step = pos.step;
  attempt_.time_s = pos.time_s;
  attempt_.resumed_from = r.from.string();
  spdlog::info("resumed from {} at step {} (epoch {}, {} samples into it); attempt {}", r.from.string(), pos.step,
               pos.loader.epoch, pos.loader.samples_consumed, attempt_.attempt);
  // the checkpoint holds the log interval it cut: the first record after it is whole, and compared
  recompute_logged(pos.step, /*whole_intervals=*/pos.interval.has_value());
}

void RunRecorder::started_over() {
  if (history_.last_step < 0) return;
  spdlog::info("no checkpoint to resume: attempt {} starts again from step 0 (the earlier attempt logged steps "
               "up to {} but saved no checkpoint)",
               attempt_.attempt, history_.last_step);
  recompute_logged(0, /*whole_intervals=*/true);
}

void RunRecorder::recompute_logged(int64_t start_step, bool whole_intervals) {
  // the check holds the recomputed steps to the logged ones: they are logged once, by the first attempt
  log_->skip_records_until(history_.last_train_step, history_.last_eval_step);
  if (cfg_.checkpoint.verify_tolerance <= 0) return;
  resume_check_ = ResumeCheck(history_.train_losses, start_step, whole_intervals, cfg_.checkpoint.verify_tolerance);
  if (resume_check_.pending() > 0)
    spdlog::info("resume check: the interrupted run logged {} step(s) after step {}; their losses will be compared",
                 resume_check_.pending(), start_step);
}

void RunRecorder::start_attempt() {
  start_ = Clock::now();
  attempt_.world_size = env_.world_size;
  attempt_.checkpoint_dir = std::filesystem::absolute(checkpoint_dir(cfg_, dir_.root)).lexically_normal().string();
  log_->attempt(attempt_);
  log_->hparams(run_hparams(cfg_), hparam_metric_tags(cfg_));
}

double RunRecorder::clock_s() const {
  return clock_offset_s_ + std::chrono::duration<double>(Clock::now() - start_).count();
}

double RunRecorder::epochs_done(const data::DataLoader& loader) const {
  const auto st = loader.state();
  const double per_epoch = static_cast<double>(loader.batches_per_epoch() * cfg_.train.batch_size * (env_.world_size / tp_size_));
  return static_cast<double>(st.epoch) + (per_epoch > 0 ? static_cast<double>(st.samples_consumed) / per_epoch : 0.0);
}

void RunRecorder::train(int64_t step, const torch::Tensor& grad_norm, const RecordSources& s) {
  record(step, grad_norm, s, std::nullopt);
}

void RunRecorder::redo_train(int64_t step, const RecordSources& s) {
  const WorldRecovery& recovery = s.recovery;
  if (!recovery.recorded_here()) return record(step, recovery.last_grad_norm(), s, std::nullopt);
  if (!last_local_loss_) return;  // that interval had no loss: no record, on any rank
  // the writer wrote its line before the failure (on the other ranks the log writes nothing anyway)
  const auto written = obs::read_history(dir_.metrics_file());
  if (written.last_train_step >= step) log_->skip_records_until(step, written.last_eval_step);
  record(step, recovery.last_grad_norm(), s, last_local_loss_);
}

void RunRecorder::record(int64_t step, const torch::Tensor& grad_norm, const RecordSources& s,
                         std::optional<double> recorded_loss) {
  // the tp group's collectives in the steps of this interval, per step (measured at every record,
  // the skipped ones included, so that the next interval starts here)
  std::optional<double> tp_comm_ms;
  if (s.tp_seconds && s.times.steps > 0)
    tp_comm_ms = (*s.tp_seconds - std::exchange(tp_seconds_, *s.tp_seconds)) * 1e3 / static_cast<double>(s.times.steps);
  std::optional<double> pp_wait_ms;
  if (s.pp_wait_seconds && s.times.steps > 0)
    pp_wait_ms = (*s.pp_wait_seconds - std::exchange(pp_wait_seconds_, *s.pp_wait_seconds)) * 1e3 /
                 static_cast<double>(s.times.steps);
  last_local_loss_.reset();
  if (!recorded_loss && s.steps.loss_count() == 0) {  // every step of the interval was skipped (the same on every rank)
    s.times = IntervalTimes{};
    return;
  }
  const double local_loss = recorded_loss ? *recorded_loss
                                          : s.steps.loss_sum().item<double>() /
                                                static_cast<double>(s.steps.loss_count());  // the log step's host sync
  last_local_loss_ = local_loss;
  obs::TrainRecord r{.step = step, .epoch = epochs_done(s.loader), .time_s = clock_s(),
                     .samples = s.recovery.samples_at(step), .loss = s.dist.all_reduce_mean(local_loss), .lr = s.lr};
  r.world_size = s.recovery.last_step_world();  // a record redone after a regroup: the world that ran the step
  if (!std::isfinite(r.loss) && !s.scaler.enabled()) throw_nonfinite_loss(r.loss, local_loss, step, env_);
  resume_check_.compare(step, r.loss);
  r.grad_norm = grad_norm.item<double>();
  if (tp_comm_ms) r.tp_comm_ms = *tp_comm_ms;
  if (pp_wait_ms) r.pp_wait_ms = *pp_wait_ms;
  if (s.pp_act_peak_bytes) r.pp_act_peak_mb = static_cast<double>(*s.pp_act_peak_bytes) / (1 << 20);
  if (s.scaler.enabled()) r.loss_scale = s.scaler.state().scale;
  r.skipped_steps = s.steps.skipped_steps();
  add_measurements(r, s.times,
                   MeasureSetup{s.recovery.samples_per_step(), s.tokens_per_sample, flops_per_sample_, peak_tflops_,
                                env_.world_size, s.device});
  if (r.pp_wait_ms && r.step_ms > 0) r.pp_bubble = std::min(1.0, *r.pp_wait_ms / r.step_ms);
  // the group's size changes since the last record, before the first record at the new size
  const auto& changes = s.recovery.world_changes();
  for (; worlds_written_ < changes.size(); ++worlds_written_) log_->world(changes[worlds_written_]);
  if (s.recovery.interval_world() > env_.world_size) r.loss_ranks = env_.world_size;
  if (r.loss_ranks)  // not the interval's loss over every sample: said, in the record too
    spdlog::warn("step {}'s record: a rank was lost in its interval, so its loss is the mean over the {} ranks left "
                 "(the lost ranks' losses of the interval never arrived): loss_ranks {} in metrics.jsonl",
                 step, *r.loss_ranks, *r.loss_ranks);
  log_->train(r);
  s.steps.reset_loss();
  s.times = IntervalTimes{};
}

void RunRecorder::eval(int64_t step, double epochs, const EvalResult& r, const EvalResult* ema, double eval_ms,
                       const EarlyStopping& tracker) {
  obs::EvalRecord rec{.step = step, .epoch = epochs, .time_s = clock_s()};
  add_eval_figures(rec, r, ema);
  rec.eval_ms = eval_ms;
  add_best(rec, tracker);
  log_->eval(rec);
}

void RunRecorder::summary(int64_t step, const std::string& stop_reason, const RecordSources& src,
                          const EarlyStopping& tracker, int64_t num_parameters) {
  const double attempt_s = std::chrono::duration<double>(Clock::now() - start_).count();
  obs::SummaryRecord s{step,             epochs_done(src.loader), src.recovery.samples_at(step), history_.wall_s + attempt_s,
                       attempt_.attempt, attempt_s,               stop_reason,                   tracker.metric(),
                       tracker.best(),   std::nullopt,            num_parameters,                env_.world_size,
                       src.device.str(), config::name_of(cfg_.train.precision)};
  if (tracker.best()) s.best_step = tracker.best_step();
  log_->summary(s);
  log_done_line(s);
  // where the results are and what comes next: the run's first line, minutes earlier, named the folder
  spdlog::info("results in {}: `trainer report {}` draws its records; `trainer eval {}` evaluates its newest "
               "checkpoint; `trainer export {} --out model.safetensors` writes the weights for PyTorch",
               dir_.root.string(), dir_.root.string(), dir_.root.string(), dir_.root.string());
}

int64_t RunRecorder::records_lost() const { return lost_before_ + log_->write_failures(); }

bool RunRecorder::report_lost_records(bool already_complete) const {
  const auto lost = records_lost();
  if (lost == 0) return false;
  if (already_complete) {  // said again at every start: a rerun that printed "complete" and exited 0 hid the loss
    spdlog::error("the run is complete and its final checkpoint is saved, but {} record(s) of {} were lost by the "
                  "attempts that trained it (they could not be written then, and cannot be now): exiting with code 1; "
                  "`trainer eval {}` recomputes the final evaluation",
                  lost, dir_.metrics_file().string(), dir_.root.string());
    return true;
  }
  spdlog::error("the run ended and its final checkpoint is saved, but {} record(s) could not be written to {} (the "
                "summary among them when it is the last{}): exiting with code 1",
                lost, dir_.metrics_file().string(),
                lost_before_ > 0 ? fmt::format("; {} by earlier attempts, stopped by a signal", lost_before_) : "");
  return true;
}

void take_over_writing(const config::RunConfig& cfg, io::RunDir& dir, RunRecorder& records, CheckpointManager& ckpt) {
  try {
    io::take_writer_locks(cfg, dir);
  } catch (const std::exception& e) {
    spdlog::warn("in-process recovery: {}", e.what());
  }
  records.become_primary();
  ckpt.become_writer();
  obs::speak_on_console(cfg.log.level);  // the console went silent with rank 0
  spdlog::info("in-process recovery: this rank writes the run's records, checkpoints and log lines now");
}

}  // namespace trainer::engine
