// What a run writes about itself, as one component: the training clock across attempts, the attempt
// record, the train / eval / summary records and the resume check that holds recomputed steps to the
// losses the interrupted run logged. Every rank computes the same figures (the loss mean is a
// collective); the run log writes them on rank 0 only (obs::RunLog's primary).
//
// The Trainer owns one and calls it; what a record reads of the world (the step runner, the loader,
// the recovery component) is handed in per call, since a regroup rebuilds those. What the records
// carry from one to the next (the last record's loss, the tp group's time so far) is kept here.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "config/config.hpp"
#include "data/loader.hpp"
#include "dist/dist_context.hpp"
#include "dist/launch_env.hpp"
#include "engine/checkpoint/checkpoint_manager.hpp"
#include "engine/checkpoint/resume_check.hpp"
#include "engine/eval/early_stopping.hpp"
#include "engine/eval/evaluator.hpp"
#include "engine/loop/train_record.hpp"
#include "engine/loop/world_recovery.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "engine/step/step_runner.hpp"
#include "io/run_dir.hpp"
#include "obs/history.hpp"
#include "obs/records.hpp"
#include "obs/run_log.hpp"

namespace trainer::engine {

// What the records read of the run, as it stands at the record (a regroup rebuilds these).
struct RecordSources {
  StepRunner& steps;
  IntervalTimes& times;  // of the interval since the last record; cleared here
  const data::DataLoader& loader;
  const WorldRecovery& recovery;
  dist::DistContext& dist;
  const LossScaler& scaler;
  double lr = 0;                   // the schedule's rate of the step recorded
  int64_t tokens_per_sample = 0;   // block size for token models, 0 for images
  torch::Device device{torch::kCPU};
  // tensor parallel: the seconds the tp group's collectives took so far (TensorParallelRun::seconds);
  // nullopt without it
  std::optional<double> tp_seconds;
  // pipeline parallel: the seconds this rank's stages waited for their neighbours so far
  // (PipelineStages::wait_seconds); nullopt without it
  std::optional<double> pp_wait_seconds;
  // pipeline parallel: the most bytes this rank's microbatches held at once so far
  // (PipelineStages::activation_peak_bytes); nullopt without it
  std::optional<int64_t> pp_act_peak_bytes;
};

class RunRecorder {
 public:
  // cfg is the Trainer's own copy, env the current world's (WorldRecovery::env: a regroup renumbers
  // it): read at each record, so they must outlive this.
  // `tp_size`: dist.tensor_parallel x dist.pipeline_parallel (the tp and pp ranks of one data-parallel
  // coordinate read the same samples, so an epoch is counted over world / tp_size ranks).
  RunRecorder(const config::RunConfig& cfg, const dist::LaunchEnv& env, const io::RunDir& dir, int64_t total_steps,
              int64_t tp_size, double flops_per_sample, double peak_tflops);

  obs::RunLog& log() { return *log_; }
  // A new rank 0 after a regroup takes over the files rank 0 wrote: the log reopens as primary and
  // skips the records already there.
  void become_primary();
  void set_total_steps(int64_t total);  // a resume at another world size changed the run's length

  // --- attempts and the clock ------------------------------------------------------------------
  // A fresh start or a resume reads the earlier attempts of metrics.jsonl first.
  void read_history();
  const obs::RunHistory& history() const { return history_; }  // as read_history found it
  // Resumed from a checkpoint: the clock continues from it, and the resume check (when
  // checkpoint.verify_tolerance is on) compares the steps the interrupted run logged after it.
  void resumed(const Resumed& r);
  // No checkpoint to resume (--resume auto), but earlier attempts logged steps (killed before their
  // first save): they are recomputed from step 0, compared as after a resume and logged once.
  void started_over();
  // A replacement rank joined the running group at `time_s` of the run's clock.
  void joined(double time_s) { clock_offset_s_ = time_s; }
  // The training loop starts: this attempt's record, and its clock from now.
  void start_attempt();
  double clock_s() const;  // the run's training clock: earlier attempts' (to the checkpoint) + this one's
  int64_t attempt() const { return attempt_.attempt; }

  // --- records -----------------------------------------------------------------------------------
  double epochs_done(const data::DataLoader& loader) const;
  // The train record of `step` (every rank: the loss mean is a collective). Nothing when every step
  // of the interval was skipped (the same on every rank).
  void train(int64_t step, const torch::Tensor& grad_norm, const RecordSources& s);
  // The record of `step` again, on every rank, after a regroup interrupted it
  // (WorldRecovery::record_pending): a rank that had completed it takes part with the loss it
  // recorded then (none: that interval had no loss, so no rank records), and the writer does not
  // write a line metrics.jsonl already holds; the others record it as they would have.
  void redo_train(int64_t step, const RecordSources& s);
  void eval(int64_t step, double epochs, const EvalResult& r, const EvalResult* ema, double eval_ms,
            const EarlyStopping& tracker);
  // The end of the run at `step`; `tracker`: early stopping's (the best metric and its step).
  void summary(int64_t step, const std::string& stop_reason, const RecordSources& s, const EarlyStopping& tracker,
               int64_t num_parameters);
  // After the summary: true (and an error line saying what it means) when records were lost to failed
  // writes (a full disk): the run then exits 1, its weights saved but its records not whole.
  // `already_complete`: a start that found the run complete says so again (and exits 1 again).
  bool report_lost_records(bool already_complete = false) const;
  // Records lost so far, this attempt's and (kept in the checkpoint it resumed) the earlier ones'.
  int64_t records_lost() const;

 private:
  // the steps earlier attempts logged after `start_step` are recomputed: logged once, their losses
  // compared (`whole_intervals`: every record's interval is whole; else only those after start_step)
  void recompute_logged(int64_t start_step, bool whole_intervals);

  const config::RunConfig& cfg_;
  const dist::LaunchEnv& env_;
  const io::RunDir& dir_;
  int64_t total_steps_, tp_size_;
  double flops_per_sample_, peak_tflops_;
  std::unique_ptr<obs::RunLog> log_;
  obs::RunHistory history_;      // metrics.jsonl before this attempt
  obs::AttemptRecord attempt_;   // this attempt: number, start step, resumed from
  size_t worlds_written_ = 0;    // the recovery's world changes written so far (obs::WorldRecord)
  double clock_offset_s_ = 0;    // the training clock at the checkpoint resumed from
  int64_t lost_before_ = 0;      // records earlier attempts lost (the checkpoint resumed from says)
  Clock::time_point start_ = Clock::now();
  // `recorded_loss`: this rank's loss of a record redone (redo_train), instead of the step runner's
  void record(int64_t step, const torch::Tensor& grad_norm, const RecordSources& s, std::optional<double> recorded_loss);

  ResumeCheck resume_check_;
  std::optional<double> last_local_loss_;  // this rank's loss in the last record (nullopt: it had none)
  double tp_seconds_ = 0;                   // RecordSources::tp_seconds at the last record
  double pp_wait_seconds_ = 0;              // RecordSources::pp_wait_seconds at the last record
};

// After a regroup that lost rank 0, this rank writes what rank 0 wrote: the records, TensorBoard, the
// summary and the checkpoint store. First the dead rank 0's locks (a second run on the folder stays
// refused); one still held (rank 0 cut off on another host, alive) does not stop the survivors.
void take_over_writing(const config::RunConfig& cfg, io::RunDir& dir, RunRecorder& records, CheckpointManager& ckpt);

}  // namespace trainer::engine
