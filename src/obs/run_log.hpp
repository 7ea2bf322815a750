// Where a run's records go: metrics.jsonl (log.jsonl), TensorBoard (log.tensorboard) and the console,
// all from rank 0 only. Each record is written whole and flushed, so a killed run leaves complete lines.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

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
  void train(const TrainRecord& r);
  void eval(const EvalRecord& r);
  void summary(const SummaryRecord& r);
  void step_done(int64_t step) { progress_.update(step); }  // every step: redraws the bar if due

 private:
  void write_json(const nlohmann::json& j);
  RunLogOptions opts_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
  ProgressDisplay progress_;
};

}  // namespace trainer::obs
