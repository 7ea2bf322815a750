// train.ema: an exponential moving average of the model's weights, kept in a second model of the
// same architecture (the "shadow"), so that it can be evaluated, checkpointed and exported like the
// model itself.
//
//   shadow = decay * shadow + (1 - decay) * weights      every train.ema.every optimizer steps
//
// The shadow starts as a copy of the initial (or model.init) weights. The decay is constant (timm's
// ModelEmaV2), or with train.ema.warmup min(decay, 1 - (1 + n)^(-2/3)) at update n (ModelEmaV3's
// warm-up; a function of the step, so a resumed run continues it exactly). Buffers: floating ones (BatchNorm running mean and
// variance) are averaged like the parameters (timm ModelEmaV2, torchvision's reference with
// use_buffers=True); integer ones (num_batches_tracked) are copied.
//
// train.ema.lookahead (airbench's lookahead, after Zhang et al. 2019): after each update the weights
// become the shadow (the "slow weights"), and the update after step t of T uses decay x (t/T)^3: 0 at
// first (the shadow is the weights), then pulling the weights back towards their past more and more
// as the learning rate decays. The last step always updates, so the run ends on the average. The
// state is the shadow, checkpointed as the EMA's, so a resume continues exactly.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "models/model.hpp"

namespace trainer::engine {

class Ema {
 public:
  // `shadow`: a model built from the same config as `live`, on the same device and memory format.
  // It starts as a copy of `live`. `parallel` (may be null): the run's strategy, which under
  // dist.sharding full gathers the live weights whenever the EMA reads them (FullParams).
  Ema(const config::EmaConfig& cfg, models::Model& live, models::ModelPtr shadow,
      const DataParallel* parallel = nullptr);

  // After the optimizer step that made `steps_done` of the run's `total_steps` steps: an update when
  // steps_done % every == 0 (lookahead: also at the last step), a collective under dist.sharding full.
  void after_step(int64_t steps_done, int64_t total_steps);
  // The shadow becomes a copy of the live weights again (a resumed checkpoint without EMA weights).
  void reset_from_live();

  // The strategy replaced (a regroup, a data reload: Trainer::rebuild_world): the old one is gone.
  void set_parallel(const DataParallel* parallel) { parallel_ = parallel; }
  models::Model& model() { return *shadow_; }
  double decay() const { return cfg_.decay; }
  // The decay of the update after `steps_done` steps: cfg.decay, with warmup the smaller warm-up one,
  // with lookahead decay x (steps_done / total_steps)^3.
  double decay_at(int64_t steps_done, int64_t total_steps) const;
  const config::EmaConfig& config() const { return cfg_; }

 private:
  config::EmaConfig cfg_;
  models::Model& live_;
  models::ModelPtr shadow_;
  const DataParallel* parallel_;
  // unique parameters and buffers (a tied tensor once), pairwise: shadow[i] follows live[i]
  std::vector<torch::Tensor> shadow_float_, live_float_, shadow_other_, live_other_;
};

// The EMA of a run (train.ema.decay > 0): a shadow built through the model registry from cfg.model
// (which never loads model.init: the shadow copies the live weights), moved to `device`, channels-last
// like the model.
// Building it leaves torch's CPU generator as it was, so the run trains the same with and without EMA.
// `ctx`: the live model's (dist.tensor_parallel: the shadow holds the same slices as the live model,
// pairwise, and is evaluated over the same tp group; its checkpoint tensors are gathered like the
// model's, engine/optim/tp_state.hpp).
std::unique_ptr<Ema> make_ema(const config::RunConfig& cfg, models::Model& live, const torch::Device& device,
                              const DataParallel* parallel = nullptr, const models::BuildContext& ctx = {});

}  // namespace trainer::engine
