#include "engine/loop/start_point.hpp"

#include "engine/loop/world_change.hpp"
#include "engine/startup/finetune.hpp"

namespace trainer::engine {
namespace {

// No checkpoint to resume: model.init, if any, on every rank; the EMA starts from those weights.
void start_from_initial_weights(const StartParts& p, const config::ModelConfig& model,
                                const std::filesystem::path& run_root, bool primary) {
  {
    FullParams whole(p.parallel, /*write=*/true);  // dist.sharding full: the weights it changes
    load_initial_weights(p.model, model, run_root, primary);
  }
  if (p.ema) p.ema->reset_from_live();
}

}  // namespace

StartPoint resume_or_start(const StartParts& p, const ResumeOptions& how, const config::RunConfig& cfg,
                           const std::filesystem::path& run_root, bool primary, int64_t data_world,
                           int64_t total_steps) {
  p.records.read_history();
  const auto resumed = p.ckpt.resume(how);
  if (!resumed) {
    start_from_initial_weights(p, cfg.model, run_root, primary);
    return {0, total_steps};
  }
  const auto& pos = resumed->pos;
  p.loader.restore(pos.loader);
  p.records.resumed(*resumed);
  if (pos.world_size <= 0 || pos.world_size == data_world) return {pos.step, total_steps};
  // saved by another number of ranks: the loader went on at the same global sample; the steps left
  // of a run sized in epochs are counted at this world's samples per step
  const int64_t total = steps_at_new_world_size(cfg.train, pos, data_world, p.loader.batches_per_epoch(), pos.step,
                                                total_steps);
  if (total != total_steps) p.records.set_total_steps(total);
  return {pos.step, total};
}

}  // namespace trainer::engine
