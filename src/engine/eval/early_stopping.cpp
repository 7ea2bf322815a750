#include "engine/eval/early_stopping.hpp"

#include <stdexcept>

namespace trainer::engine {

EarlyStopping::EarlyStopping(const config::EarlyStoppingConfig& cfg, const std::string& fallback_metric)
    : enabled_(!cfg.metric.empty()),
      metric_(cfg.metric.empty() ? fallback_metric : cfg.metric),
      patience_(cfg.patience),
      min_delta_(cfg.min_delta) {
  switch (cfg.mode) {
    case config::StopMode::Max: maximize_ = true; break;
    case config::StopMode::Min: maximize_ = false; break;
    case config::StopMode::Auto: maximize_ = metric_ == "accuracy" || metric_ == "top5"; break;
  }
}

bool EarlyStopping::update(double value, int64_t step) {
  evaluated_step_ = step;
  const bool improved = !best_ || (maximize_ ? value > *best_ + min_delta_ : value < *best_ - min_delta_);
  if (improved) {
    best_ = value;
    best_step_ = step;
    bad_evals_ = 0;
  } else {
    ++bad_evals_;
  }
  return stops();
}

}  // namespace trainer::engine
