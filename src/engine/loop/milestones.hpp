// The checkpoints and evaluations a run makes on its own schedule (the stops for a signal or a
// changed data file save through CheckpointManager alone): after a step, the periodic checkpoint
// (checkpoint.every_steps) and evaluation (train.eval_every), and the best checkpoint an evaluation
// may set; at the end of the run, the last evaluation (unless the last step had one) and the final
// checkpoint. The end's are made once: when a peer is lost during the end (dist.recovery
// in_process), the survivors end the run without doing again what was done.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "config/config.hpp"
#include "engine/checkpoint/checkpoint_manager.hpp"

namespace trainer::engine {

class Milestones {
 public:
  // `evaluate(step)`: the evaluation at `step` on every rank, its record written; true when early
  // stopping asks the run to end. `cfg` must outlive this.
  Milestones(const config::RunConfig& cfg, std::function<bool(int64_t)> evaluate)
      : cfg_(cfg), evaluate_(std::move(evaluate)) {}

  // After `step`: its periodic checkpoint and evaluation, none when it is the run's `last` (the end
  // makes those). Returns true when early stopping ends the run here.
  bool after_step(int64_t step, bool last, CheckpointManager& ckpt);
  // The end of the run at `step`: the final checkpoint is never optional (a failed save throws
  // CheckpointFailed).
  void at_end(int64_t step, CheckpointManager& ckpt);

 private:
  const config::RunConfig& cfg_;
  std::function<bool(int64_t)> evaluate_;
  bool evaluated_last_ = false;  // the last step was followed by an evaluation
  bool final_saved_ = false;     // the final checkpoint is saved
};

}  // namespace trainer::engine
