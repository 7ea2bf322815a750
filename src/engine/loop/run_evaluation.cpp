#include "engine/loop/run_evaluation.hpp"

#include <spdlog/spdlog.h>

#include <optional>
#include <stdexcept>

#include "engine/step/step_runner.hpp"

namespace trainer::engine {

RunEvaluation::RunEvaluation(const config::RunConfig& cfg, const std::string& default_metric)
    : ema_eval_(cfg.train.ema.decay > 0 && cfg.train.ema.eval),
      early_stopping_asked_(!cfg.train.early_stopping.metric.empty()),
      tracker_(cfg.train.early_stopping, default_metric) {}

bool RunEvaluation::evaluate(int64_t step, double epochs, models::Model& model, Ema* ema, RunRecorder& records) {
  if (!evaluator_) {
    if (!warned_no_val_)
      spdlog::warn("no validation data: evaluation is skipped{}",
                   tracker_.metric().empty() || !early_stopping_asked_
                       ? ""
                       : ", and train.early_stopping (" + tracker_.metric() + ") never stops the run");
    warned_no_val_ = true;
    return false;
  }
  const auto t0 = Clock::now();
  const EvalResult r = evaluator_->run(model);
  if (r.count == 0) throw std::runtime_error("the validation split gave no samples to evaluate");
  std::optional<EvalResult> ema_r;
  if (ema && ema_eval_) ema_r = evaluator_->run(ema->model());
  // early stopping and `best` follow the trained weights; the EMA's figures ride along. The tracker
  // takes the step once every figure is in and just before its record: an evaluation that a changed
  // data file cuts short leaves neither (a checkpoint saved then says the step is not evaluated, and
  // the evaluation made again on reopened data counts once)
  const bool stop = tracker_.update(metric_value(r, tracker_.metric()), step);
  records.eval(step, epochs, r, ema_r ? &*ema_r : nullptr, ms_since(t0), tracker_);
  return stop;
}

void RunEvaluation::log_early_stop(int64_t step) const {
  spdlog::info("early stopping at step {}: {} has not improved for {} evaluations (best {:.4f} at step {})", step,
                 tracker_.metric(), tracker_.evals_without_improvement(), tracker_.best().value_or(0),
               tracker_.best_step());
}

}  // namespace trainer::engine
