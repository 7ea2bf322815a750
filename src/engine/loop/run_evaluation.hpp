// Evaluation during a run, as one component: the evaluator over the validation split (rebuilt when
// a regroup changes the world), early stopping's tracker (saved in checkpoints, so it outlives
// every evaluator), and the eval record. The loop asks evaluate() at its evaluation steps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/config.hpp"
#include "engine/eval/early_stopping.hpp"
#include "engine/eval/evaluator.hpp"
#include "engine/loop/run_recorder.hpp"
#include "engine/step/ema.hpp"
#include "models/model.hpp"

namespace trainer::engine {

class RunEvaluation {
 public:
  // `default_metric`: the family's first eval metric, when train.early_stopping names none.
  RunEvaluation(const config::RunConfig& cfg, const std::string& default_metric);

  // null: the run has no validation split (evaluate() then warns once and does nothing)
  void set_evaluator(std::unique_ptr<Evaluator> evaluator) { evaluator_ = std::move(evaluator); }
  bool can_evaluate() const { return evaluator_ != nullptr; }  // the run has a validation split
  EarlyStopping& tracker() { return tracker_; }
  const EarlyStopping& tracker() const { return tracker_; }

  // Evaluates `model` (and the EMA's weights too under train.ema.eval: `ema` may be null), writes the
  // eval record at `epochs`, and returns true when early stopping asks the run to end. Every rank
  // calls it at the same step (the evaluator combines the ranks' figures).
  bool evaluate(int64_t step, double epochs, models::Model& model, Ema* ema, RunRecorder& records);
  void log_early_stop(int64_t step) const;  // the line that says why the run ends at `step`

 private:
  bool ema_eval_;
  bool early_stopping_asked_;  // train.early_stopping.metric set (not the default metric best follows)
  EarlyStopping tracker_;
  std::unique_ptr<Evaluator> evaluator_;
  bool warned_no_val_ = false;
};

}  // namespace trainer::engine
