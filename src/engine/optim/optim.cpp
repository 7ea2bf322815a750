#include "engine/optim/optim.hpp"

#include <spdlog/spdlog.h>

#include <stdexcept>
#include <unordered_set>

#include "engine/optim/param_groups.hpp"
#include "tensor_parallel/layers.hpp"

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
    // tensor parallel's slice of an embedding is one too (dist.tensor_parallel: GPT's wte)
    if (const auto* v = m.as<tensor_parallel::VocabParallelEmbeddingImpl>())
      embedding_weights.insert(v->weight.unsafeGetTensorImpl());
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

namespace {

template <class Options, class Fused, class Plain>
std::unique_ptr<torch::optim::Optimizer> make_grouped(const Options& defaults, const std::vector<GroupPlan>& plans,
                                                      bool fused) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  std::vector<double> scales;
  for (const auto& g : plans) {
    auto o = std::make_unique<Options>(defaults);
    o->lr(defaults.lr() * g.lr_scale);
    o->weight_decay(g.weight_decay);
    groups.emplace_back(g.params, std::move(o));
    scales.push_back(g.lr_scale);
  }
  std::unique_ptr<torch::optim::Optimizer> opt;
  LrScales* s = nullptr;
  if (fused) {
    auto f = std::make_unique<Fused>(std::move(groups), defaults);
    s = f.get();
    opt = std::move(f);
  } else {
    auto p = std::make_unique<Plain>(std::move(groups), defaults);
    s = p.get();
    opt = std::move(p);
  }
  s->lr_scales = std::move(scales);
  return opt;
}

void log_param_groups(const config::OptimConfig& cfg, const std::vector<GroupPlan>& plans) {
  if (cfg.groups.empty() && cfg.layer_decay >= 1.0) return;
  for (size_t i = 0; i < plans.size(); ++i) {
    std::string names;
    for (size_t k = 0; k < plans[i].names.size() && k < 6; ++k) names += (k ? ", " : "") + plans[i].names[k];
    if (plans[i].names.size() > 6) names += ", ...";
    spdlog::info("optim group {}: {} tensors, lr {:.6g} (x{:.4g}), weight_decay {:.4g}: {}", i, plans[i].params.size(),
                 cfg.lr * plans[i].lr_scale, plans[i].lr_scale, plans[i].weight_decay, names);
  }
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const config::OptimConfig& cfg,
                                                         const torch::nn::Module& model) {
  const auto plans = plan_param_groups(cfg, model);
  log_param_groups(cfg, plans);
  return build_optimizer(cfg, plans);
}

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const config::OptimConfig& cfg,
                                                         const std::vector<GroupPlan>& plans) {
  if (cfg.name == config::OptimizerKind::Sgd) {
    auto o = torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum).nesterov(cfg.nesterov).weight_decay(
        cfg.weight_decay);
    return make_grouped<torch::optim::SGDOptions, FusedSGD, ScaledOptimizer<torch::optim::SGD>>(o, plans, cfg.fused);
  }
  {  // config::OptimizerKind::Adamw
    if (cfg.betas.size() != 2) throw std::invalid_argument("optim.betas needs two values");
    auto o = torch::optim::AdamWOptions(cfg.lr).betas({cfg.betas[0], cfg.betas[1]}).eps(cfg.eps).weight_decay(
        cfg.weight_decay);
    return make_grouped<torch::optim::AdamWOptions, FusedAdamW, ScaledOptimizer<torch::optim::AdamW>>(o, plans,
                                                                                                       cfg.fused);
  }
}

namespace {

// The fused kernels walk a parameter and its gradient as flat memory: element i of one must sit at
// offset i of the other. A dimension of size 1 has no steps, so its stride says nothing: autograd's
// layout contract leaves it free (a channels-last conv weight of one input channel gets a gradient
// strided like a contiguous one), and PyTorch's own fused-optimizer check ignores it too.
bool same_memory_order(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) != 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

}  // namespace

bool fused_update_supported(const torch::Tensor& p) {
  const auto& g = p.grad();
  return g.defined() && !g.is_sparse() && (p.is_cpu() || p.is_cuda()) && p.is_floating_point() &&
         g.scalar_type() == p.scalar_type() && p.is_non_overlapping_and_dense() && same_memory_order(g, p);
}

namespace {

// Tensors of one parameter group that share a device and dtype: one fused kernel call.
struct FusedBucket {
  torch::Device device;
  torch::ScalarType dtype;
  std::vector<torch::Tensor> params, grads, a, b, c, steps;  // a/b/c: per-optimizer state lists
};

FusedBucket& bucket_for(std::vector<FusedBucket>& buckets, const torch::Tensor& p) {
  for (auto& b : buckets)
    if (b.device == p.device() && b.dtype == p.scalar_type()) return b;
  buckets.push_back(FusedBucket{p.device(), p.scalar_type(), {}, {}, {}, {}, {}, {}});
  return buckets.back();
}

// Runs the base class's per-parameter step for `fallback` only: the other parameters' gradients are
// hidden for the duration (the base step skips parameters without a gradient).
template <class Base>
void step_unfused(Base& opt, const std::vector<torch::Tensor>& fallback) {
  if (fallback.empty()) return;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> hidden;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) {
      bool keep = false;
      for (const auto& f : fallback) keep = keep || f.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
      if (!keep && p.grad().defined()) {
        hidden.emplace_back(p, p.grad());
        p.mutable_grad() = torch::Tensor();
      }
    }
  try {
    opt.Base::step();
  } catch (...) {
    for (auto& [p, g] : hidden) p.mutable_grad() = g;
    throw;
  }
  for (auto& [p, g] : hidden) p.mutable_grad() = g;
}

// The loss closure of Optimizer::step, evaluated with gradients on (undefined without one).
torch::Tensor evaluate_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  at::AutoGradMode grad_mode(true);
  return closure();
}

}  // namespace

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::Tensor loss = evaluate_closure(closure);
  torch::NoGradGuard no_grad;
  ++step_calls_;
  std::vector<torch::Tensor> fallback;
  stepped_.clear();
  for (auto& group : param_groups_) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    std::vector<FusedBucket> buckets;
    std::vector<torch::Tensor> stale_counters;  // one _foreach_add_ advances every counter in sync
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!fused_update_supported(p)) {
        fallback.push_back(p);
        continue;
      }
      void* key = p.unsafeGetTensorImpl();
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        if (o.amsgrad()) s->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(s)).first;
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      if (o.amsgrad() && !s.max_exp_avg_sq().defined())
        s.max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
      auto& counter = counters_[key];
      if (!counter.tensor.defined() || counter.tensor.device() != p.device()) {
        counter.tensor = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(p.device()));
        counter.value = 0;
      }
      if (counter.value == s.step()) {
        stale_counters.push_back(counter.tensor);
      } else {  // state loaded from a checkpoint, or stepped by the unfused loop: set it outright
        counter.tensor.fill_(static_cast<double>(s.step() + 1));
      }
      s.step(s.step() + 1);
      counter.value = s.step();
      stepped_.push_back(key);
      auto& b = bucket_for(buckets, p);
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.a.push_back(s.exp_avg());
      b.b.push_back(s.exp_avg_sq());
      if (o.amsgrad()) b.c.push_back(s.max_exp_avg_sq());
      b.steps.push_back(counter.tensor);
    }
    if (!stale_counters.empty()) torch::_foreach_add_(stale_counters, 1);
    const auto [beta1, beta2] = o.betas();
    for (auto& b : buckets) {
      if (lr_.defined())
        at::_fused_adamw_(b.params, b.grads, b.a, b.b, b.c, b.steps, lr_, beta1, beta2, o.weight_decay(), o.eps(),
                          o.amsgrad(), /*maximize=*/false);
      else
        at::_fused_adamw_(b.params, b.grads, b.a, b.b, b.c, b.steps, o.lr(), beta1, beta2, o.weight_decay(), o.eps(),
                          o.amsgrad(), /*maximize=*/false);
    }
  }
  last_fused_ = fallback.empty();
  step_unfused<torch::optim::AdamW>(*this, fallback);
  return loss;
}

void FusedAdamW::count_steps(int64_t delta) {
  // a replay advanced the device counters (its captured _foreach_add_): the host follows, so that
  // the next eager step and a checkpoint see the true count
  for (const void* key : stepped_) {
    auto it = state_.find(const_cast<void*>(key));
    if (it == state_.end()) continue;
    auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
    s.step(s.step() + delta);
    counters_[key].value += delta;
  }
}

torch::Tensor FusedSGD::step(LossClosure closure) {
  torch::Tensor loss = evaluate_closure(closure);
  torch::NoGradGuard no_grad;
  ++step_calls_;
  std::vector<torch::Tensor> fallback;
  for (auto& group : param_groups_) {
    auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
    const bool momentum = o.momentum() != 0;
    // a parameter's first momentum step copies the gradient into the buffer: a separate kernel call
    std::vector<FusedBucket> first, later;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!fused_update_supported(p)) {
        fallback.push_back(p);
        continue;
      }
      bool is_first = false;
      torch::Tensor buf;
      if (momentum) {
        void* key = p.unsafeGetTensorImpl();
        auto it = state_.find(key);
        if (it == state_.end()) {
          auto s = std::make_unique<torch::optim::SGDParamState>();
          s->momentum_buffer(torch::empty_like(p, at::MemoryFormat::Preserve));
          it = state_.emplace(key, std::move(s)).first;
          is_first = true;
        }
        buf = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
      }
      auto& b = bucket_for(is_first ? first : later, p);
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      if (momentum) b.a.push_back(buf);
    }
    for (auto* list : {&first, &later})
      for (auto& b : *list) {
        if (lr_.defined())
          at::_fused_sgd_(b.params, b.grads, b.a, o.weight_decay(), o.momentum(), lr_, o.dampening(), o.nesterov(),
                          /*maximize=*/false, /*is_first_step=*/list == &first);
        else
          at::_fused_sgd_(b.params, b.grads, b.a, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                          /*maximize=*/false, /*is_first_step=*/list == &first);
      }
  }
  last_fused_ = fallback.empty();
  step_unfused<torch::optim::SGD>(*this, fallback);
  return loss;
}

void set_learning_rate(torch::optim::Optimizer& opt, double lr) {
  const auto* scaled = dynamic_cast<const LrScales*>(&opt);
  auto& groups = opt.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const double scale = scaled && i < scaled->lr_scales.size() ? scaled->lr_scales[i] : 1.0;
    groups[i].options().set_lr(lr * scale);
  }
}

bool uniform_learning_rate(const torch::optim::Optimizer& opt) {
  const auto* scaled = dynamic_cast<const LrScales*>(&opt);
  if (!scaled) return true;
  for (double s : scaled->lr_scales)
    if (s != 1.0) return false;
  return true;
}

}  // namespace trainer::engine
