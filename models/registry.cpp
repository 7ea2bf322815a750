#include <set>
#include <stdexcept>

#include "models/gpt.hpp"
#include "models/model.hpp"
#include "models/resnet.hpp"
#include "models/vit.hpp"

namespace trainer::models {

int64_t Model::num_parameters() const {
  std::set<const void*> seen;  // a tensor registered under two names counts once
  int64_t n = 0;
  for (const auto& p : parameters(true))
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  return n;
}

void ModelRegistry::add(const std::string& arch, Factory factory) {
  if (factories_.count(arch)) throw std::invalid_argument("model arch '" + arch + "' is registered twice");
  factories_[arch] = std::move(factory);
}

ModelPtr ModelRegistry::create(const config::ModelConfig& cfg) const {
  auto it = factories_.find(cfg.arch);
  if (it == factories_.end()) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown model.arch '" + cfg.arch + "'; known: " + known);
  }
  return it->second(cfg);
}

void Model::train(bool on) {
  torch::nn::Module::train(on);
  if (on)
    for (auto& m : kept_in_eval_) m->train(false);
}

void Model::keep_in_eval(std::vector<std::shared_ptr<torch::nn::Module>> modules) {
  kept_in_eval_ = std::move(modules);
  if (is_training()) train(true);
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : factories_) out.push_back(name);  // std::map: already sorted
  return out;
}

bool has_channels_last_strides(const torch::Tensor& t) {
  return t.dim() == 4 && t.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
}

void to_channels_last(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  auto restride = [](torch::Tensor& t) {
    if (t.dim() != 4 || has_channels_last_strides(t)) return;
    t.set_data(at::empty_like(t, at::MemoryFormat::ChannelsLast).copy_(t));
  };
  for (auto& p : m.parameters(/*recurse=*/true)) restride(p);
  for (auto& b : m.buffers(/*recurse=*/true)) restride(b);
}

void register_builtin_models(ModelRegistry& registry) {
  registry.add("resnet", [](const config::ModelConfig& c) -> ModelPtr { return std::make_shared<ResNet>(c); });
  registry.add("gpt", [](const config::ModelConfig& c) -> ModelPtr { return std::make_shared<Gpt>(c); });
  registry.add("vit", [](const config::ModelConfig& c) -> ModelPtr { return std::make_shared<VisionTransformer>(c); });
}

}  // namespace trainer::models
