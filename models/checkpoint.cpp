#include "models/checkpoint.hpp"

#include <ATen/autocast_mode.h>

namespace trainer::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr c10::DeviceType kAutocastDevices[] = {c10::DeviceType::CPU, c10::DeviceType::CUDA};

struct AutocastState {
  bool enabled[2] = {false, false};
  at::ScalarType dtype[2] = {at::kBFloat16, at::kHalf};
  static AutocastState capture() {
    AutocastState s;
    for (int i = 0; i < 2; ++i) {
      s.enabled[i] = at::autocast::is_autocast_enabled(kAutocastDevices[i]);
      s.dtype[i] = at::autocast::get_autocast_dtype(kAutocastDevices[i]);
    }
    return s;
  }
  void apply() const {
    for (int i = 0; i < 2; ++i) {
      at::autocast::set_autocast_enabled(kAutocastDevices[i], enabled[i]);
      at::autocast::set_autocast_dtype(kAutocastDevices[i], dtype[i]);
    }
  }
};

// What backward needs besides the saved input: held in the node's saved_data as a capsule.
struct Stage : torch::CustomClassHolder {
  torch::nn::Module* module = nullptr;
  std::function<torch::Tensor(const torch::Tensor&)> fn;
  std::vector<torch::Tensor> params;
  std::vector<at::Generator> generators;  // CPU, plus the input's CUDA device when on CUDA
  std::vector<torch::Tensor> rng_states;  // their states when forward started
  AutocastState autocast;
};

// Sets each generator to the given state and gives the previous states back.
std::vector<torch::Tensor> swap_rng(const std::vector<at::Generator>& gens, const std::vector<torch::Tensor>& states) {
  std::vector<torch::Tensor> before;
  for (size_t i = 0; i < gens.size(); ++i) {
    auto g = gens[i];
    std::lock_guard<std::mutex> lock(g.mutex());
    before.push_back(g.get_state());
    g.set_state(states[i]);
  }
  return before;
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // inputs = {x, params...}
  static torch::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<Stage> stage, at::TensorList inputs) {
    for (auto g : stage->generators) {
      std::lock_guard<std::mutex> lock(g.mutex());
      stage->rng_states.push_back(g.get_state());
    }
    stage->autocast = AutocastState::capture();
    torch::NoGradGuard no_grad;
    torch::Tensor y = stage->fn(inputs[0]);
    ctx->save_for_backward({inputs[0]});
    ctx->saved_data["stage"] = c10::IValue::make_capsule(stage);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto stage = c10::static_intrusive_pointer_cast<Stage>(ctx->saved_data["stage"].toCapsule());
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor xd = x.detach().requires_grad_(x.requires_grad());

    // Buffers are restored after the recompute's backward: running statistics move once per real forward.
    std::vector<torch::Tensor> buffers = stage->module->buffers(true), saved_buffers;
    for (const auto& b : buffers) saved_buffers.push_back(b.clone());
    const auto rng_now = swap_rng(stage->generators, stage->rng_states);
    const auto autocast_now = AutocastState::capture();
    stage->autocast.apply();
    // a scope of its own, as torch.utils.checkpoint's `with autocast`: backward runs outside the
    // forward's scope, so without it the recompute's low-precision copies of the weights stayed in the
    // cast cache, keyed by the weights, and the next step's forward read them after the update
    at::autocast::increment_nesting();
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      y = stage->fn(xd);
    }
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    autocast_now.apply();
    swap_rng(stage->generators, rng_now);

    std::vector<torch::Tensor> wrt;
    std::vector<size_t> slot;  // index into the gradient list returned below
    if (xd.requires_grad()) wrt.push_back(xd), slot.push_back(1);
    for (size_t i = 0; i < stage->params.size(); ++i)
      if (stage->params[i].requires_grad()) wrt.push_back(stage->params[i]), slot.push_back(2 + i);
    variable_list grads(2 + stage->params.size());  // {stage (not a tensor), x, params...}
    if (!wrt.empty() && y.requires_grad()) {
      auto g = torch::autograd::grad({y}, wrt, {grad_out[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
      for (size_t i = 0; i < g.size(); ++i) grads[slot[i]] = g[i];
    }
    // Only now: batch_norm's backward holds the running statistics as saved variables, and writing
    // them before it ran would trip autograd's in-place modification check.
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(saved_buffers[i]);
    }
    return grads;
  }
};

}  // namespace

torch::Tensor checkpoint(torch::nn::Module& stage, const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                         const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled()) return fn(x);  // nothing is recorded, nothing to save
  auto s = c10::make_intrusive<Stage>();
  s->module = &stage;
  s->fn = fn;
  s->params = stage.parameters(true);
  s->generators.push_back(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
  if (x.is_cuda()) s->generators.push_back(at::globalContext().defaultGenerator(x.device()));
  std::vector<torch::Tensor> inputs{x};
  inputs.insert(inputs.end(), s->params.begin(), s->params.end());
  return CheckpointFunction::apply(s, at::TensorList(inputs));
}

}  // namespace trainer::models
