#include "engine/loop/nonfinite_policy.hpp"

#include <spdlog/spdlog.h>

#include <stdexcept>

namespace trainer::engine {

bool NonFinitePolicy::after_step(bool nonfinite, int64_t& step, StepRunner& steps, CheckpointManager& ckpt,
                                 IntervalTimes& times) {
  if (!nonfinite) {
    in_row_ = 0;
    return false;
  }
  if (mode_ == config::NonFinite::Rollback) {
    steps.reset_loss();
    times = IntervalTimes{};
    step = ckpt.roll_back(step);
    return true;
  }
  if (++in_row_ > max_in_row_)
    throw std::runtime_error(fmt::format("non-finite gradients in {} consecutive steps up to step {} "
                                         "(train.max_nonfinite {}): giving up",
                                         in_row_, step, max_in_row_));
  spdlog::warn("non-finite gradients at step {}: step skipped ({} in a row, at most {})", step, in_row_, max_in_row_);
  return false;
}

}  // namespace trainer::engine
