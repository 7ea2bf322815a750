// Best-metric tracking and early stopping on an evaluation metric (patience, min_delta).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/config.hpp"

namespace trainer::engine {

class EarlyStopping {
 public:
  // metric: cfg.metric, or `fallback_metric` when it is "" (then the tracker only records the best
  // and never asks to stop). mode auto: max for accuracy/top5, min otherwise.
  EarlyStopping(const config::EarlyStoppingConfig& cfg, const std::string& fallback_metric);

  // Records the value of one evaluation at `step`; returns true when the run should stop: `patience`
  // evaluations in a row without improving on the best by more than min_delta.
  bool update(double value, int64_t step);

  bool stopping_enabled() const { return enabled_; }
  const std::string& metric() const { return metric_; }
  bool maximize() const { return maximize_; }
  std::optional<double> best() const { return best_; }
  int64_t best_step() const { return best_step_; }
  int64_t evals_without_improvement() const { return bad_evals_; }
  // Early stopping's answer as the tracker stands (after a resume: the run it was saved by had ended)
  bool stops() const { return enabled_ && bad_evals_ >= patience_; }
  // The step of the last evaluation recorded (-1: none). A checkpoint saved at an evaluation step
  // before its evaluation (a stop signal's) says so, and the resumed run evaluates that step first.
  int64_t evaluated_step() const { return evaluated_step_; }
  // Resume: the tracker as a checkpoint saved it.
  void restore(std::optional<double> best, int64_t best_step, int64_t evals_without_improvement,
               int64_t evaluated_step) {
    best_ = best;
    best_step_ = best_step;
    bad_evals_ = evals_without_improvement;
    evaluated_step_ = evaluated_step;
  }

 private:
  bool enabled_;
  std::string metric_;
  bool maximize_;
  int64_t patience_;
  double min_delta_;
  std::optional<double> best_;
  int64_t best_step_ = -1;
  int64_t bad_evals_ = 0;
  int64_t evaluated_step_ = -1;
};

}  // namespace trainer::engine
