#include "engine/optim.hpp"

#include <stdexcept>
#include <unordered_set>

namespace trainer::engine {
namespace {

std::vector<std::pair<std::string, torch::Tensor>> unique_named_parameters(const torch::nn::Module& model) {
  // named_parameters() lists a tied weight under each owner's name; an optimizer must see it once
  std::unordered_set<const c10::TensorImpl*> seen;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const auto& p = item.value();
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    out.emplace_back(item.key(), p);
  }
  return out;
}

}  // namespace

std::vector<torch::Tensor> unique_parameters(const torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (auto& [name, p] : unique_named_parameters(model)) out.push_back(p);
  return out;
}

ParamGroups split_decay_groups(const torch::nn::Module& model, bool decay_norm_and_bias) {
  std::unordered_set<const c10::TensorImpl*> embedding_weights;
  // modules(include_self=true) needs the model in a shared_ptr; the model itself is checked apart
  auto note = [&](const torch::nn::Module& m) {
    if (const auto* emb = m.as<torch::nn::EmbeddingImpl>()) embedding_weights.insert(emb->weight.unsafeGetTensorImpl());
  };
  note(model);
  for (const auto& m : model.modules(/*include_self=*/false)) note(*m);

  ParamGroups g;
  for (auto& [name, p] : unique_named_parameters(model)) {
    bool no_decay = !decay_norm_and_bias && (p.dim() < 2 || embedding_weights.count(p.unsafeGetTensorImpl()) > 0);
    (no_decay ? g.no_decay_names : g.decay_names).push_back(name);
    (no_decay ? g.no_decay : g.decay).push_back(p);
  }
  return g;
}

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const config::OptimConfig& cfg,
                                                         const torch::nn::Module& model) {
  ParamGroups g = split_decay_groups(model, cfg.decay_norm_and_bias);
  if (cfg.name == "sgd") {
    auto decay = torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum).nesterov(cfg.nesterov).weight_decay(
        cfg.weight_decay);
    auto none = decay;
    none.weight_decay(0.0);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(g.decay, std::make_unique<torch::optim::SGDOptions>(decay));
    if (!g.no_decay.empty()) groups.emplace_back(g.no_decay, std::make_unique<torch::optim::SGDOptions>(none));
    return std::make_unique<torch::optim::SGD>(std::move(groups), decay);
  }
  if (cfg.name == "adamw") {
    if (cfg.betas.size() != 2) throw std::invalid_argument("optim.betas needs two values");
    auto decay = torch::optim::AdamWOptions(cfg.lr)
                     .betas({cfg.betas[0], cfg.betas[1]})
                     .eps(cfg.eps)
                     .weight_decay(cfg.weight_decay);
    auto none = decay;
    none.weight_decay(0.0);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(g.decay, std::make_unique<torch::optim::AdamWOptions>(decay));
    if (!g.no_decay.empty()) groups.emplace_back(g.no_decay, std::make_unique<torch::optim::AdamWOptions>(none));
    return std::make_unique<torch::optim::AdamW>(std::move(groups), decay);
  }
  throw std::invalid_argument("unknown optimizer '" + cfg.name + "'; known: adamw, sgd");
}

void set_learning_rate(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

}  // namespace trainer::engine
