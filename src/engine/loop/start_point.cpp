#include "engine/loop/start_point.hpp"

#include <spdlog/spdlog.h>

#include <chrono>

#include "engine/loop/world_change.hpp"
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

}  // namespace

StartPoint resume_or_start(const StartParts& p, const ResumeOptions& how, const config::RunConfig& cfg,
                           const std::filesystem::path& run_root, bool primary, int64_t data_world,
                           int64_t total_steps) {
  p.records.read_history();
  const auto resumed = p.ckpt.resume(how);
  if (!resumed) {
    start_from_initial_weights(p, cfg.model, run_root, primary);
    if (how.mode == ResumeMode::Auto) p.records.started_over();  // a deliberate --resume never starts anew
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
