// The optimizer's parameter groups: optim.groups (per-name lr / weight decay, first match wins),
// optim.layer_decay (the model's blocks: Model::units), and no weight decay for biases, norms and embeddings.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace trainer::engine {

struct GroupPlan {
  double lr_scale = 1.0;  // the group's lr over the schedule's (optim.lr's) lr
  double weight_decay = 0.0;
  std::vector<std::string> names;  // first name of each parameter
  std::vector<torch::Tensor> params;
};

// Every unique trainable parameter in one group. Without optim.groups and layer_decay: the decay group
// then the no-decay one (as split_decay_groups), the layout of every earlier checkpoint; otherwise
// those two first (possibly empty: then left out) and one more per distinct (lr, weight decay), in
// parameter order. A groups regex that matches no trainable parameter is a warning.
std::vector<GroupPlan> plan_param_groups(const config::OptimConfig& cfg, const torch::nn::Module& model);

// optim.layer_decay's depth of each parameter, read off the model's units (models/model.hpp, the
// family's blocks): 0 for the units before the first block (embeddings, a stem), i + 1 for block i,
// -1 for the units after the last one (final norm, head: lr unscaled). A module that is not a
// models::Model has no blocks.
class LayerDepths {
 public:
  explicit LayerDepths(const torch::nn::Module& model);
  int64_t of(const std::string& name) const;  // -1 for a name no unit owns
  int64_t blocks() const { return blocks_; }

 private:
  std::vector<std::pair<std::string, int64_t>> prefixes_;  // (prefix, depth)
  int64_t blocks_ = 0;
};

}  // namespace trainer::engine
