#include "engine/loop/milestones.hpp"

namespace trainer::engine {

bool Milestones::eval_due(int64_t step) const {
  return cfg_.train.eval_every > 0 && step > 0 && step % cfg_.train.eval_every == 0;
}

bool Milestones::after_step(int64_t step, bool last, CheckpointManager& ckpt, IntervalTimes& times) {
  if (last) return false;
  struct NotTheInterval {  // (also when an evaluation or a save throws: a rank lost in it)
    IntervalTimes& times;
    Clock::time_point t0 = Clock::now();
    ~NotTheInterval() { times.start += Clock::now() - t0; }
  } not_the_interval{times};
  // the evaluation before the save: the step's checkpoint then holds its outcome (best, early
  // stopping's count), and a run resumed from it does not evaluate the step again
  // made again after a peer was lost in them (dist.recovery in_process): what completed is not redone
  const bool due = eval_due(step);
  if (due && evaluated_step_() < step && evaluate_(step)) return true;  // early stopping: the end saves this step
  bool saved = saved_step_ == step;
  if (!saved && cfg_.checkpoint.every_steps > 0 && step % cfg_.checkpoint.every_steps == 0)
    saved = ckpt.save(step, SaveKind::Periodic);
  if (saved) saved_step_ = step;
  if (due) ckpt.keep_best(step, saved);
  return false;
}

bool Milestones::at_resume(int64_t step, CheckpointManager& ckpt) {
  if (!eval_due(step) || evaluated_step_() >= step) return false;
  if (evaluate_(step)) return true;
  ckpt.keep_best(step, /*saved_at_step=*/false);  // if best: saved again, now with the evaluation in it
  return false;
}

void Milestones::at_end(int64_t step, CheckpointManager& ckpt) {
  if (evaluated_step_() < step) evaluate_(step);
  if (!final_saved_ && ckpt.save(step, SaveKind::Final)) ckpt.keep_best(step, /*saved_at_step=*/true);
  final_saved_ = true;
}

}  // namespace trainer::engine
