// train.nonfinite skip | rollback | abort after each optimizer step (abort stops in the step's own
// checks and in the record). Owns the count of skipped steps in a row.
#pragma once

#include <cstdint>

#include "config/config.hpp"
#include "engine/checkpoint/checkpoint_manager.hpp"
#include "engine/step/step_runner.hpp"

namespace trainer::engine {

class NonFinitePolicy {
 public:
  explicit NonFinitePolicy(const config::TrainConfig& t) : mode_(t.nonfinite), max_in_row_(t.max_nonfinite) {}
  // A finite step resets the count of skips in a row; a non-finite one is skipped (at most
  // train.max_nonfinite in a row, then std::runtime_error) or rolled back to the last checkpoint,
  // moving `step` back (returns true then: the loop starts over from there).
  bool after_step(bool nonfinite, int64_t& step, StepRunner& steps, CheckpointManager& ckpt, IntervalTimes& times);

 private:
  config::NonFinite mode_;
  int64_t max_in_row_;
  int64_t in_row_ = 0;
};

}  // namespace trainer::engine
