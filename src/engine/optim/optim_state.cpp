#include "engine/optim/optim_state.hpp"

#include <stdexcept>

namespace trainer::engine {

OptimStateKind optim_state_kind(const torch::optim::Optimizer& opt) {
  if (dynamic_cast<const torch::optim::SGD*>(&opt)) return OptimStateKind::Sgd;
  if (dynamic_cast<const torch::optim::AdamW*>(&opt)) return OptimStateKind::Adamw;
  throw std::invalid_argument("optimizer state: only SGD and AdamW are supported");
}

const std::vector<const char*>& optim_state_fields(OptimStateKind kind) {
  static const std::vector<const char*> sgd = {"momentum_buffer"};
  static const std::vector<const char*> adamw = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return kind == OptimStateKind::Sgd ? sgd : adamw;
}

const std::vector<const char*>& all_optim_state_names() {
  static const std::vector<const char*> names = {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};
  return names;
}

bool visit_state_tensors(const torch::optim::OptimizerParamState& st,
                         const std::function<void(const char*, const torch::Tensor&)>& f) {
  if (const auto* a = dynamic_cast<const torch::optim::AdamWParamState*>(&st)) {
    f("exp_avg", a->exp_avg());
    f("exp_avg_sq", a->exp_avg_sq());
    f("max_exp_avg_sq", a->max_exp_avg_sq());
    return true;
  }
  if (const auto* m = dynamic_cast<const torch::optim::SGDParamState*>(&st)) {
    f("momentum_buffer", m->momentum_buffer());
    return true;
  }
  return false;
}

std::optional<int64_t> state_step(const torch::optim::OptimizerParamState& st) {
  if (const auto* a = dynamic_cast<const torch::optim::AdamWParamState*>(&st)) return a->step();
  return std::nullopt;
}

std::unique_ptr<torch::optim::OptimizerParamState> make_param_state(
    OptimStateKind kind, std::optional<int64_t> step, const std::function<torch::Tensor(const char*)>& field) {
  if (kind == OptimStateKind::Sgd) {
    auto buf = field("momentum_buffer");
    if (!buf.defined()) return nullptr;  // SGD without momentum, or a parameter never stepped
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(buf);
    return s;
  }
  if (!step) return nullptr;  // never stepped
  auto s = std::make_unique<torch::optim::AdamWParamState>();
  s->step(*step);
  s->exp_avg(field("exp_avg"));
  s->exp_avg_sq(field("exp_avg_sq"));
  s->max_exp_avg_sq(field("max_exp_avg_sq"));
  return s;
}

bool state_complete(const torch::optim::OptimizerParamState& st) {
  if (const auto* a = dynamic_cast<const torch::optim::AdamWParamState*>(&st))
    return a->exp_avg().defined() && a->exp_avg_sq().defined();
  return true;
}

}  // namespace trainer::engine
