// Console progress on rank 0: a one-line bar (rate, ETA, last loss) redrawn in place when stdout is
// a terminal, or plain periodic lines through spdlog for batch jobs and log files.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include "obs/logging.hpp"
#include "obs/records.hpp"

namespace trainer::obs {

// log.progress: "on" | "off" | "auto". auto: a bar when stdout is a terminal a person watches
// (a tty, TERM set and not "dumb", not an mpirun/mpiexec rank's pty: see interactive_terminal);
// on: a bar whatever stdout is. Either way only on rank 0 (RunLog draws it on its primary only).
// `stdout_is_tty` is what the caller measured; the environment is read through `getenv_fn`.
bool progress_bar_wanted(const std::string& mode, bool stdout_is_tty, const GetEnvFn& getenv_fn);
bool progress_bar_wanted(const std::string& mode, bool stdout_is_tty);  // the process environment

// "[#####.....]  50/100 steps  12.3 it/s  ETA 00:04  loss 1.234", `width` characters of bar.
// The log's ETA line, once `done_steps` steps have run since the first record (`from_step` at
// `from_s` on the run clock, the start-up left out): the steps left at the rate measured between the
// two records, and the UTC time it would end, from `now` (unix seconds).
std::string format_eta_line(int64_t from_step, double from_s, int64_t step, double time_s, int64_t total,
                            double now);

// `loss`: the last logged loss; none before the first log step ("loss --", never a made-up 0).
std::string format_progress_line(int64_t step, int64_t total, double steps_per_s, std::optional<double> loss,
                                 int width = 30);
std::string format_duration(double seconds);  // "1:02:03", "04:05"

// One line for a train record: "step 10/100 | epoch 0.31 | loss 2.3012 | lr 1.00e-03 | ...".
std::string format_train_line(const TrainRecord& r, int64_t total_steps);
std::string format_eval_line(const EvalRecord& r);

// The bar. While enabled it is the console overlay (obs/logging.hpp): every console log line,
// from any thread, is preceded by "\r\x1b[K" (the bar cleared) and followed by the bar redrawn.
class ProgressDisplay : public ConsoleOverlay {
 public:
  ProgressDisplay(bool enabled, int64_t total_steps, FILE* out = stdout);
  ~ProgressDisplay() override;  // ends the bar's line
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;
  // Redraws at most ~10 times a second; host-only values (no device sync).
  void update(int64_t step);
  void set_loss(double loss) { loss_ = loss; }
  // Clears the bar until the next update().
  void clear();
  bool enabled() const { return enabled_; }

  void hide() override;  // around a console log line
  void show() override;

 private:
  void erase_locked();
  bool enabled_;
  int64_t total_;
  FILE* out_;
  std::optional<double> loss_;  // none until the first train record
  std::mutex mu_;
  bool drawn_ = false;  // the bar is on the screen now
  bool hidden_ = false;  // hide() took it off for a log line: show() puts it back
  std::string line_;     // the text last drawn
  int64_t start_step_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace trainer::obs
