#include "engine/loop/milestones.hpp"

namespace trainer::engine {

bool Milestones::after_step(int64_t step, bool last, CheckpointManager& ckpt) {
  evaluated_last_ = false;
  if (last) return false;
  bool saved = false;
  if (cfg_.checkpoint.every_steps > 0 && step % cfg_.checkpoint.every_steps == 0)
    saved = ckpt.save(step, SaveKind::Periodic);
  if (cfg_.train.eval_every <= 0 || step % cfg_.train.eval_every != 0) return false;
  evaluated_last_ = true;
  const bool stop_early = evaluate_(step);
  ckpt.keep_best(step, saved);
  return stop_early;
}

void Milestones::at_end(int64_t step, CheckpointManager& ckpt) {
  if (!evaluated_last_) evaluate_(step);
  evaluated_last_ = true;
  if (!final_saved_ && ckpt.save(step, SaveKind::Final)) ckpt.keep_best(step, /*saved_at_step=*/true);
  final_saved_ = true;
}

}  // namespace trainer::engine
