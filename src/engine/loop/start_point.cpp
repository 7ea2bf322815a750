#include "engine/loop/start_point.hpp"

#include <spdlog/spdlog.h>

#include <chrono>

#include "engine/checkpoint/checkpointing.hpp"
#include "engine/loop/world_change.hpp"
#include "io/checkpoint.hpp"
#include "obs/history.hpp"
#include "engine/startup/finetune.hpp"

namespace trainer::engine {
namespace {

// The weights a model computes from its training data (Model::init_from_data): the first `n` samples
// of the training set as the model sees them unaugmented (bad ones skipped), on every rank alike.
void init_from_training_data(models::Model& model, const data::Dataset& train, int64_t n, bool primary) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<torch::Tensor> images;
  for (int64_t i = 0; i < train.size() && static_cast<int64_t>(images.size()) < n; ++i) {
    try {
      images.push_back(train.get(i, /*epoch=*/0, /*augment=*/false).input);
    } catch (const data::DataChanged&) {
      throw;
    } catch (const data::DataError&) {  // data.on_bad_sample: skip (an error otherwise throws earlier)
    }
  }
  if (images.empty()) throw data::DataError(train.describe() + ": no training sample to initialise the model's data-computed weights from");
  model.init_from_data(torch::stack(images));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (primary) spdlog::info("model.{}: weights computed from the first {} training images in {:.1f} s", model.arch(), images.size(), s);
}

// No checkpoint to resume: the weights computed from the data, then model.init, if any, on every rank;
// the EMA starts from those weights.
void start_from_initial_weights(const StartParts& p, const config::ModelConfig& model,
                                const std::filesystem::path& run_root, bool primary) {
  {
    FullParams whole(p.parallel, /*write=*/true);  // dist.sharding full: the weights it changes
    if (const int64_t n = p.model.data_init_samples(); n > 0) init_from_training_data(p.model, p.loader.dataset(), n, primary);
    load_initial_weights(p.model, model, run_root, primary);
  }
  if (p.ema) p.ema->reset_from_live();
}

// --resume auto found no checkpoint in `now`, but an earlier attempt of the run (its attempt record)
// saved checkpoints in another folder (checkpoint.dir changed, or a relative one resolved from
// another working directory): starting over would redo that work in silence.
void refuse_moved_checkpoints(const obs::RunHistory& h, const std::filesystem::path& now) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (auto it = h.checkpoint_dirs.rbegin(); it != h.checkpoint_dirs.rend(); ++it) {  // the latest attempt's first
    const auto& before = *it;
    if (fs::equivalent(before, now, ec) || fs::absolute(now).lexically_normal() == fs::path(before)) continue;
    const auto held = io::step_folders_newest_first(before);
    if (held.empty()) continue;
    throw std::runtime_error("--resume auto: checkpoint.dir " + now.string() + " holds no checkpoint, but earlier "
                             "attempts of this run saved theirs in " + before + " (newest " +
                             held.front().path.filename().string() + "). Set checkpoint.dir back to it, or continue "
                             "from it with --resume " + before + " (this run then saves in " + now.string() +
                             "), or start over with --resume never --force");
  }
}

}  // namespace

StartPoint resume_or_start(const StartParts& p, const ResumeOptions& how, const config::RunConfig& cfg,
                           const std::filesystem::path& run_root, bool primary, int64_t data_world,
                           int64_t total_steps) {
  p.records.read_history();
  const auto resumed = p.ckpt.resume(how);
  if (!resumed && how.mode == ResumeMode::Auto) refuse_moved_checkpoints(p.records.history(), checkpoint_dir(cfg, run_root));
  if (!resumed) {
    start_from_initial_weights(p, cfg.model, run_root, primary);
    if (how.mode == ResumeMode::Auto) p.records.started_over();  // a deliberate --resume never starts anew
    return {0, total_steps};
  }
  const auto& pos = resumed->pos;
  try {
    p.loader.restore(pos.loader);
  } catch (const data::DataError& e) {  // a position past this split: the checkpoint's, or another split
    throw std::runtime_error((resumed->from / "state.json").string() + ": " + e.what() +
                             " (the checkpoint was saved over other data, or its state was edited)");
  }
  p.records.resumed(*resumed);
  if (cfg.train.max_steps > 0 && pos.step > cfg.train.max_steps)  // found from outside: said nothing, ended "max_steps"
    spdlog::warn("the checkpoint is at step {}, past train.max_steps {} (lowered since it was saved?): nothing is "
                 "trained, and the run ends at step {}, not {}; start over with --resume never --force for a "
                 "shorter run", pos.step, cfg.train.max_steps, pos.step, cfg.train.max_steps);
  if (pos.world_size <= 0 || pos.world_size == data_world) {
    // an epochs-sized run whose length was recounted before (an earlier attempt at another world size,
    // another batch): the samples left count it again, else the config's count trains past its epochs
    if (cfg.train.max_steps == 0 && pos.total_steps > 0 && pos.total_steps != total_steps) {
      const int64_t total = epochs_total_from(cfg.train, pos, data_world, p.loader.batches_per_epoch(), pos.step);
      if (total != total_steps) {
        spdlog::info("the run is sized in epochs: {} steps in all, for the samples its {} epochs have left (from "
                     "the start at this world size: {})", total, cfg.train.epochs, total_steps);
        p.records.set_total_steps(total);
        return {pos.step, total, pos.samples};
      }
    }
    return {pos.step, total_steps, pos.samples};
  }
  // saved by another number of ranks: the loader went on at the same global sample; the steps left
  // of a run sized in epochs are counted at this world's samples per step
  // under tensor or pipeline parallel the sizes are the data-parallel ones, not the processes (found from outside)
  const bool model_parallel = cfg.dist.tensor_parallel > 1 || cfg.dist.pipeline_parallel > 1;
  const int64_t total = steps_at_new_world_size(cfg.train, pos, data_world, p.loader.batches_per_epoch(), pos.step,
                                                total_steps, model_parallel ? "data-parallel ranks" : "ranks");
  if (total != total_steps) p.records.set_total_steps(total);
  return {pos.step, total, pos.samples};
}

bool run_already_complete(int64_t start_step, int64_t total_steps, bool joined, const RunEvaluation& evaluation) {
  const auto& tracker = evaluation.tracker();
  const bool end_left = !joined && evaluation.can_evaluate() && tracker.evaluated_step() < start_step;
  if (start_step >= total_steps && !(start_step > 0 && end_left)) {
    spdlog::info("the run is already complete ({} of {} steps); nothing to train", start_step, total_steps);
    return true;
  }
  if (!joined && start_step > 0 && tracker.stops() && tracker.evaluated_step() == start_step) {
    spdlog::info("the run is already complete: early stopping ended it at step {} ({} did not improve for {} "
                 "evaluations); nothing to train",
                 start_step, tracker.metric(), tracker.evals_without_improvement());
    return true;
  }
  return false;
}

}  // namespace trainer::engine
