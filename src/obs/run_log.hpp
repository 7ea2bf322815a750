// Where a run's records go: metrics.jsonl (log.jsonl), TensorBoard (log.tensorboard) and the console,
// all from rank 0 only. Each record is one write(2) of a whole line; a write that fails (a full disk)
// is cut back off the file, warned about once and counted, so the file never holds a torn line that
// the next record would glue onto. A torn last line left by a killed run is removed when the file
// is opened again.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "obs/progress.hpp"
#include "obs/records.hpp"
#include "obs/tensorboard.hpp"

namespace trainer::obs {

struct RunLogOptions {
  bool primary = true;  // rank 0: writes files and the console; other ranks write nothing here
  bool jsonl = true;
  std::string jsonl_path;
  bool tensorboard = false;
  std::string tensorboard_dir;
  bool progress_bar = false;
  int64_t total_steps = 0;
};

class RunLog {
 public:
  explicit RunLog(const RunLogOptions& opts);  // throws std::runtime_error naming a file it cannot open
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;
  void train(const TrainRecord& r);
  void eval(const EvalRecord& r);
  void summary(const SummaryRecord& r);
  void attempt(const AttemptRecord& r);
  void world(const WorldRecord& r);
  int64_t write_failures() const { return write_failures_; }  // records that could not be written so far
  // TensorBoard's hparams dashboard (log.tensorboard): this attempt's hyperparameters and the metric
  // tags to show beside them; summary() ends the session (success)
  void hparams(const std::vector<HParam>& hparams, const std::vector<std::string>& metric_tags);
  void step_done(int64_t step) { progress_.update(step); }  // every step: redraws the bar if due
  // A resumed run recomputes the steps its previous attempt logged after the checkpoint: train
  // records of steps <= `train_step` and eval records of steps <= `eval_step` are not written again
  // (metrics.jsonl and TensorBoard hold each once). Per kind: an attempt killed between a step's train
  // record and its eval record wrote the one, not the other.
  void skip_records_until(int64_t train_step, int64_t eval_step) {
    replay_train_until_ = train_step;
    replay_eval_until_ = eval_step;
  }

 private:
  void write_json(const nlohmann::json& j);
  // a train or eval record into metrics.jsonl and, with log.tensorboard, its scalars at `step`
  void store(const nlohmann::json& record, int64_t step, const std::vector<std::pair<std::string, double>>& tb_scalars);
  RunLogOptions opts_;
  int jsonl_fd_ = -1;
  int64_t replay_train_until_ = -1, replay_eval_until_ = -1, write_failures_ = 0;
  // the ETA line: the first train record this process logged (its step and run clock), once logged
  int64_t eta_from_step_ = -1;
  double eta_from_s_ = 0;
  bool eta_logged_ = false;
  static constexpr int64_t kEtaAfterSteps = 20;
  std::unique_ptr<TensorBoardWriter> tb_;
  ProgressDisplay progress_;
};

}  // namespace trainer::obs
