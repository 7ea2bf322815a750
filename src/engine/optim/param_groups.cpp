#include "engine/optim/param_groups.hpp"

#include <spdlog/spdlog.h>

#include <cmath>

#include "config/name_pattern.hpp"
#include "engine/optim/optim.hpp"
#include "models/model.hpp"

namespace trainer::engine {

LayerDepths::LayerDepths(const torch::nn::Module& model) {
  const auto* m = dynamic_cast<const models::Model*>(&model);
  if (!m) return;
  for (const auto& u : m->units()) {
    const int64_t depth = u.checkpointed ? ++blocks_ : (blocks_ == 0 ? 0 : -1);
    for (const auto& p : u.prefixes) prefixes_.emplace_back(p, depth);
  }
}

int64_t LayerDepths::of(const std::string& name) const {
  for (const auto& [prefix, depth] : prefixes_)
    if (name == prefix || (prefix.ends_with(".") && name.rfind(prefix, 0) == 0)) return depth;
  return -1;
}

namespace {

struct GroupKey {
  double lr_scale, weight_decay;
};

std::vector<GroupKey> group_keys(const config::OptimConfig& cfg, const ParamGroups& split, const LayerDepths& layers,
                                 std::vector<size_t>& rule_hits) {
  std::vector<config::NamePattern> rules;
  for (const auto& g : cfg.groups) rules.emplace_back(g.match);  // checked at load
  const int64_t depth = layers.blocks();
  std::vector<GroupKey> keys;
  auto key_of = [&](const std::string& name, bool decays) {
    double lr = cfg.lr, wd = cfg.weight_decay;
    for (size_t i = 0; i < rules.size(); ++i)
      if (rules[i].found_in(name)) {
        ++rule_hits[i];
        lr = cfg.groups[i].lr.value_or(lr);
        wd = cfg.groups[i].weight_decay.value_or(wd);
        break;
      }
    double scale = cfg.lr > 0 ? lr / cfg.lr : 1.0;
    if (cfg.layer_decay < 1.0) {
      const int64_t layer = layers.of(name);
      if (layer >= 0) scale *= std::pow(cfg.layer_decay, static_cast<double>(depth - layer + 1));
    }
    return GroupKey{scale, decays ? wd : 0.0};
  };
  for (const auto& n : split.decay_names) keys.push_back(key_of(n, true));
  for (const auto& n : split.no_decay_names) keys.push_back(key_of(n, false));
  if (cfg.layer_decay < 1.0 && depth == 0)
    spdlog::warn("optim.layer_decay {}: the model has no blocks (Model::units); it has no effect", cfg.layer_decay);
  return keys;
}

}  // namespace

std::vector<GroupPlan> plan_param_groups(const config::OptimConfig& cfg, const torch::nn::Module& model) {
  const ParamGroups split = split_decay_groups(model, cfg.decay_norm_and_bias);
  std::vector<GroupPlan> plans(2);
  plans[0].weight_decay = cfg.weight_decay;
  std::vector<size_t> hits(cfg.groups.size(), 0);
  const auto keys = group_keys(cfg, split, LayerDepths(model), hits);
  const size_t n_decay = split.decay.size();
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool decays = i < n_decay;
    const auto& name = decays ? split.decay_names[i] : split.no_decay_names[i - n_decay];
    const auto& p = decays ? split.decay[i] : split.no_decay[i - n_decay];
    const size_t base = decays ? 0 : 1;  // the default groups, where the defaults apply
    size_t g = base;
    if (keys[i].lr_scale != 1.0 || keys[i].weight_decay != plans[base].weight_decay) {
      g = 2;
      while (g < plans.size() && (plans[g].lr_scale != keys[i].lr_scale || plans[g].weight_decay != keys[i].weight_decay))
        ++g;
      if (g == plans.size()) plans.push_back(GroupPlan{keys[i].lr_scale, keys[i].weight_decay, {}, {}});
    }
    plans[g].names.push_back(name);
    plans[g].params.push_back(p);
  }
  for (size_t i = 0; i < hits.size(); ++i)
    if (hits[i] == 0) spdlog::warn("optim.groups[{}]: '{}' matches no trainable parameter", i, cfg.groups[i].match);
  // the decay group stays even when empty (an optimizer needs one group); an empty no-decay one goes,
  // as before optim.groups existed
  std::vector<GroupPlan> out;
  for (size_t g = 0; g < plans.size(); ++g)
    if (g == 0 || !plans[g].params.empty()) out.push_back(std::move(plans[g]));
  return out;
}

}  // namespace trainer::engine
