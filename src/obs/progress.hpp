// Console progress on rank 0: a one-line bar (rate, ETA, last loss) redrawn in place when stdout is
// a terminal, or plain periodic lines through spdlog for batch jobs and log files.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "obs/records.hpp"

namespace trainer::obs {

// log.progress: "on" | "off" | "auto" (auto: a bar when stdout is a terminal).
bool progress_bar_wanted(const std::string& mode, bool stdout_is_tty);

// "[#####.....]  50/100 steps  12.3 it/s  ETA 00:04  loss 1.234", `width` characters of bar.
std::string format_progress_line(int64_t step, int64_t total, double steps_per_s, double loss, int width = 30);
std::string format_duration(double seconds);  // "1:02:03", "04:05"

// One line for a train record: "step 10/100 | epoch 0.31 | loss 2.3012 | lr 1.00e-03 | ...".
std::string format_train_line(const TrainRecord& r, int64_t total_steps);
std::string format_eval_line(const EvalRecord& r);

class ProgressDisplay {
 public:
  ProgressDisplay(bool enabled, int64_t total_steps, FILE* out = stdout);
  ~ProgressDisplay();  // ends the bar's line
  // Redraws at most ~10 times a second; host-only values (no device sync).
  void update(int64_t step);
  void set_loss(double loss) { loss_ = loss; }
  // Before a log line is printed: clears the bar so the line is not mangled.
  void clear();
  bool enabled() const { return enabled_; }

 private:
  bool enabled_;
  int64_t total_;
  FILE* out_;
  double loss_ = 0;
  bool drawn_ = false;
  int64_t start_step_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace trainer::obs
