#include "engine/optim/train_state.hpp"

#include <ATen/Context.h>
#include <spdlog/spdlog.h>

#include <map>
#include <optional>
#include <set>

#include "engine/optim/optim_state.hpp"

namespace trainer::engine {
namespace {

// TensorImpl* -> the parameter's first name in named_parameters() order (tied tensors once).
std::map<const void*, std::string> parameter_names(const torch::nn::Module& model) {
  std::map<const void*, std::string> out;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    out.emplace(item.value().unsafeGetTensorImpl(), item.key());
  return out;
}

std::string name_of(const std::map<const void*, std::string>& names, const torch::Tensor& p) {
  auto it = names.find(p.unsafeGetTensorImpl());
  if (it == names.end()) throw std::runtime_error("optimizer holds a parameter that is not part of the model");
  return it->second;
}

}  // namespace

io::NamedTensors optimizer_state_tensors(const torch::optim::Optimizer& opt, const torch::nn::Module& model) {
  (void)optim_state_kind(opt);  // SGD or AdamW, else a clear error
  const auto names = parameter_names(model);
  io::NamedTensors out;
  for (const auto& group : opt.param_groups()) {
    for (const auto& p : group.params()) {
      auto it = opt.state().find(p.unsafeGetTensorImpl());
      if (it == opt.state().end()) continue;  // no step taken for this parameter yet
      const std::string name = name_of(names, p);
      if (const auto step = state_step(*it->second)) out.emplace_back(name + ".step", torch::tensor(*step, torch::kInt64));
      visit_state_tensors(*it->second, [&](const char* field, const torch::Tensor& t) {
        if (t.defined()) out.emplace_back(name + "." + field, t.detach().cpu().clone());
      });
    }
  }
  return out;
}

void load_optimizer_state(torch::optim::Optimizer& opt, const torch::nn::Module& model, const io::NamedTensors& tensors) {
  const auto kind = optim_state_kind(opt);
  const auto names = parameter_names(model);
  std::map<std::string, torch::Tensor> given(tensors.begin(), tensors.end());
  std::set<std::string> used;
  std::vector<std::string> problems;
  auto take = [&](const std::string& key, const torch::Tensor& like) -> torch::Tensor {
    auto it = given.find(key);
    if (it == given.end()) return {};
    used.insert(key);
    if (it->second.sizes() != like.sizes()) {
      problems.push_back(key + ": shape " + c10::str(it->second.sizes()) + ", parameter has " + c10::str(like.sizes()));
      return {};
    }
    // in the parameter's layout, as the optimizer makes its state (a clone of the gradient): a
    // channels-last parameter's contiguous state took ATen's strided loops, which round otherwise than
    // the vectorised ones, and a resumed run drifted from step 2 on (found from outside, 2026-12-07)
    return torch::empty_like(like).copy_(it->second);
  };
  opt.state().clear();
  std::vector<std::string> stateless;
  for (auto& group : opt.param_groups()) {
    for (auto& p : group.params()) {
      const std::string name = name_of(names, p);
      std::optional<int64_t> step;
      if (auto it = given.find(name + ".step"); kind == OptimStateKind::Adamw && it != given.end()) {
        used.insert(it->first);
        step = it->second.item<int64_t>();
      }
      auto s = make_param_state(kind, step, [&](const char* field) { return take(name + "." + field, p); });
      if (!s) {  // never stepped (or SGD without momentum)
        stateless.push_back(name);
        continue;
      }
      if (!state_complete(*s)) problems.push_back(name + ": incomplete AdamW state");
      opt.state()[p.unsafeGetTensorImpl()] = std::move(s);
    }
  }
  for (const auto& [key, t] : given)
    if (!used.count(key)) problems.push_back(key + ": no such parameter state in this optimizer");
  if (!problems.empty()) {
    std::string msg = "optimizer state does not match this model/optimizer:";
    for (const auto& p : problems) msg += "\n  " + p;
    throw std::runtime_error(msg);
  }
  // some parameters have state and these none: a parameter that never had a gradient, else a file
  // that lost entries (the old reader took it in silence and the state restarted at zero)
  if (!used.empty() && !stateless.empty()) {
    std::string list;
    for (size_t i = 0; i < stateless.size() && i < 5; ++i) list += (i ? ", " : "") + stateless[i];
    if (stateless.size() > 5) list += ", ... (" + std::to_string(stateless.size()) + " in all)";
    spdlog::warn("the optimizer state has no entry for {} trainable parameter(s): {}; their state starts from zero "
                 "(right for a parameter that never had a gradient, else the checkpoint lost them)",
                 stateless.size(), list);
  }
}

io::NamedTensors rng_state_tensors(const torch::Device& device) {
  io::NamedTensors out = {{"cpu", at::detail::getDefaultCPUGenerator().get_state()}};
  // through the global context, not CUDA headers: the same code builds against a CPU-only LibTorch
  if (device.is_cuda()) out.emplace_back("cuda", at::globalContext().defaultGenerator(device).get_state());
  return out;
}

void restore_rng_state(const io::NamedTensors& tensors, const torch::Device& device) {
  for (const auto& [name, t] : tensors) {
    if (name == "cpu") {
      auto gen = at::detail::getDefaultCPUGenerator();  // a handle on the shared generator
      gen.set_state(t);
    } else if (name == "cuda" && device.is_cuda()) {
      auto gen = at::globalContext().defaultGenerator(device);
      gen.set_state(t);
    }
  }
}

}  // namespace trainer::engine
