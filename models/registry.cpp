#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "io/weight_copy.hpp"
#include "models/convnet.hpp"
#include "models/gpt.hpp"
#include "models/model.hpp"
#include "models/resnet.hpp"
#include "models/vit.hpp"

namespace trainer::models {

int64_t unit_of(const std::vector<ModelUnit>& units, const std::string& name) {
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& pre : units[u].prefixes)
      if (name == pre || (pre.ends_with(".") && name.starts_with(pre))) return static_cast<int64_t>(u);
  return -1;
}

int64_t Model::num_parameters() const {
  std::set<const void*> seen;  // a tensor registered under two names counts once
  int64_t n = 0;
  for (const auto& p : parameters(true))
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  return n;
}

int64_t Model::global_num_parameters() const {
  std::map<std::string, std::vector<int64_t>> global;
  for (const auto& [name, spec] : shard_specs())
    if (!spec.replicated()) global[name] = spec.global_shape;
  if (global.empty()) return num_parameters();
  std::set<const void*> seen;
  int64_t n = 0;
  for (const auto& p : named_parameters(true)) {
    if (!seen.insert(p.value().unsafeGetTensorImpl()).second) continue;
    auto it = global.find(p.key());
    int64_t count = p.value().numel();
    if (it != global.end()) {
      count = 1;
      for (auto d : it->second) count *= d;
    }
    n += count;
  }
  return n;
}

void ModelRegistry::add(ModelSpec spec) {
  const std::string name = spec.rules.name;
  if (specs_.count(name)) throw std::invalid_argument("model arch '" + name + "' is registered twice");
  specs_.emplace(name, std::move(spec));
}

const ModelSpec& ModelRegistry::spec(const std::string& arch) const {
  auto it = specs_.find(arch);
  if (it == specs_.end()) {
    std::string known;
    for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown model.arch '" + arch + "'; known: " + known);
  }
  return it->second;
}

ModelPtr ModelRegistry::create(const config::ModelConfig& cfg, const BuildContext& ctx) const {
  return spec(cfg.arch).build(cfg, ctx);
}

torch::Tensor Model::forward_units(const torch::Tensor& x, int64_t first, int64_t last) {
  const auto n = static_cast<int64_t>(units().size());
  if (first < 0 || last >= n || first > last)
    throw std::invalid_argument("model " + arch() + ": units " + std::to_string(first) + ".." + std::to_string(last) +
                                " are not a range of its " + std::to_string(n) + " units");
  torch::Tensor y = x;
  for (int64_t i = first; i <= last; ++i) y = run_unit(static_cast<size_t>(i), y);
  return y;
}

torch::Tensor Model::run_unit(size_t i, const torch::Tensor& x) {
  if (!streams_.step_key || !is_training()) return unit_forward(i, x);
  UnitRngScope rng(x.device(), unit_stream_seed(*streams_.step_key, streams_.micro, static_cast<int64_t>(i)));
  return unit_forward(i, x);
}

torch::Tensor Model::unit_forward(size_t, const torch::Tensor&) {
  throw std::invalid_argument("model.arch " + arch() + " has no pipeline stages (dist.pipeline_parallel)");
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
  for (const auto& [name, s] : specs_) out.push_back(name);  // std::map: already sorted
  return out;
}

bool has_channels_last_strides(const torch::Tensor& t) {
  return t.dim() == 4 && t.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
}

void to_channels_last(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  auto restride = [](torch::Tensor& t) {
    if (t.dim() != 4 || has_channels_last_strides(t) || io::is_released(t)) return;
    t.set_data(at::empty_like(t, at::MemoryFormat::ChannelsLast).copy_(t));
  };
  for (auto& p : m.parameters(/*recurse=*/true)) restride(p);
  for (auto& b : m.buffers(/*recurse=*/true)) restride(b);
}

namespace {
// The built-in families: one line each; a family's spec lives next to its model.
void add_builtin_specs(ModelRegistry& registry) {
  registry.add(resnet_spec());
  registry.add(convnet_spec());
  registry.add(gpt_spec());
  registry.add(vit_spec());
}
}  // namespace

void register_builtin_models(ModelRegistry& registry) {
  add_builtin_specs(registry);
  register_builtin_archs();
}

void register_builtin_archs() {
  static std::once_flag once;
  std::call_once(once, [] {
    ModelRegistry r;
    add_builtin_specs(r);
    for (const auto& name : r.names()) config::register_arch(r.spec(name).rules);
  });
}

const ModelRegistry& builtin_models() {
  static const ModelRegistry registry = [] {
    ModelRegistry r;
    register_builtin_models(r);
    return r;
  }();
  return registry;
}

ModelPtr build_model_on(const config::ModelConfig& cfg, const torch::Device& device, const BuildContext& ctx) {
  auto model = builtin_models().create(cfg, ctx);
  if (ctx.before_move) ctx.before_move(*model);
  io::move_weights(*model, device);  // a released weight stays released: no bytes on the device
  if (cfg.channels_last && model->input_kind() == InputKind::Image) to_channels_last(*model);
  return model;
}

void tp_width_rules(const config::RunConfig& c, int64_t heads, const std::string& heads_key, int64_t width,
                    const std::string& width_text, const config::ErrFn& err) {
  const int64_t t = c.dist.tensor_parallel;
  if (t <= 1) return;
  const std::string ts = std::to_string(t);
  if (heads % t != 0)
    err("dist.tensor_parallel", heads_key + " " + std::to_string(heads) + " does not divide by " + ts +
                                    " (attention is split over the ranks by whole heads)");
  if (width % t != 0)
    err("dist.tensor_parallel", "the MLP width " + width_text + " = " + std::to_string(width) + " does not divide by " + ts);
}

}  // namespace trainer::models
