// The checkpoints and evaluations a run makes on its own schedule (the stops for a signal or a
// changed data file save through CheckpointManager alone): after a step, the periodic evaluation
// (train.eval_every) and then checkpoint (checkpoint.every_steps), so that the checkpoint holds the
// evaluation's outcome, and the best checkpoint an evaluation may set; at the end of the run, the
// last evaluation (unless the last step had one) and the final checkpoint. A stop signal's
// checkpoint at an evaluation step is saved before the evaluation: the resumed run makes it first
// (at_resume), so the run evaluates each step once and its best and early stopping are an
// uninterrupted run's. The end's are made once: when a peer is lost during the end (dist.recovery
// in_process), the survivors end the run without doing again what was done.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "config/config.hpp"
#include "engine/checkpoint/checkpoint_manager.hpp"
#include "engine/step/step_runner.hpp"

namespace trainer::engine {

class Milestones {
 public:
  // `evaluate(step)`: the evaluation at `step` on every rank, its record written; true when early
  // stopping asks the run to end. `evaluated_step()`: the step of the last evaluation made (or
  // restored from a checkpoint), -1 none. `cfg` must outlive this.
  Milestones(const config::RunConfig& cfg, std::function<bool(int64_t)> evaluate,
             std::function<int64_t()> evaluated_step)
      : cfg_(cfg), evaluate_(std::move(evaluate)), evaluated_step_(std::move(evaluated_step)) {}

  // After `step`: its periodic checkpoint and evaluation, none when it is the run's `last` (the end
  // makes those). Returns true when early stopping ends the run here. Called again for the same step
  // (the survivors of a peer lost in them), it makes only what did not complete. Their time is not the
  // training interval's (`times`): the next record's rates are of its steps (docs/METRICS.md), where
  // an evaluation had made a record after it read 8x too slow.
  bool after_step(int64_t step, bool last, CheckpointManager& ckpt, IntervalTimes& times);
  // A run resumed at `step` (not its last): the evaluation due at `step` that its checkpoint was
  // saved before (a stop signal's), and the best checkpoint it may set. True when early stopping
  // ends the run here. Every rank calls it (the evaluation is collective).
  bool at_resume(int64_t step, CheckpointManager& ckpt);
  // The end of the run at `step`: the final checkpoint is never optional (a failed save throws
  // CheckpointFailed).
  void at_end(int64_t step, CheckpointManager& ckpt);

 private:
  bool eval_due(int64_t step) const;  // train.eval_every's steps

  const config::RunConfig& cfg_;
  std::function<bool(int64_t)> evaluate_;
  std::function<int64_t()> evaluated_step_;
  bool final_saved_ = false;     // the final checkpoint is saved
  int64_t saved_step_ = -1;      // the step of the last periodic checkpoint saved
};

}  // namespace trainer::engine
