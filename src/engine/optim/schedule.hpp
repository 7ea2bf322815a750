// Learning-rate schedules: constant, step, linear, cosine; each with a linear warmup and a floor.
// Closed form of the optimizer step index, so a resumed run gets the same rates without replaying.
#pragma once

#include <cstdint>

#include "config/config.hpp"

namespace trainer::engine {

// Optimizer steps of the run: train.max_steps, or ceil(epochs x batches_per_epoch / grad_accum)
// (at least 1) when the run is sized in epochs. batches_per_epoch is per rank.
int64_t total_optimizer_steps(const config::TrainConfig& t, int64_t batches_per_epoch);

// A run sized in train.epochs (`total_steps` optimizer steps) shorter than schedule.warmup_steps: the
// warning that the schedule clips the warmup to the run (a run sized in max_steps is told at load).
void warn_if_warmup_clipped(const config::RunConfig& cfg, int64_t total_steps);

class LrSchedule {
 public:
  // base_lr: optim.lr; total_steps: optimizer steps of the whole run (the decay reaches the floor there).
  // Throws std::invalid_argument for an unknown schedule name.
  LrSchedule(const config::ScheduleConfig& cfg, double base_lr, int64_t total_steps);

  // Rate for the optimizer step with 0-based index `step`. With W = min(warmup_steps, T), T = total_steps,
  // floor = base * min_lr_ratio and p = (step - W) / max(1, T - W) clamped to [0, 1]:
  //   step < W : base * (step + 1) / W
  //   constant : base
  //   step     : max(floor, base * gamma^floor((step - W) / step_size))
  //   linear   : floor + (base - floor) * (1 - p)
  //   cosine   : floor + (base - floor) * (1 + cos(pi p)) / 2
  double lr_at(int64_t step) const;

 private:
  config::ScheduleConfig cfg_;
  double base_lr_;
  int64_t total_steps_;
};

}  // namespace trainer::engine
