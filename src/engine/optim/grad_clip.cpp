#include "engine/optim/grad_clip.hpp"

namespace trainer::engine {
namespace {

std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

torch::Tensor norm_of(const std::vector<torch::Tensor>& grads) {
  // one fused kernel per dtype/device group instead of one norm per tensor
  auto norms = at::_foreach_norm(grads, 2);
  return torch::stack(norms).to(torch::kFloat32).norm();
}

}  // namespace

torch::Tensor global_grad_norm(const std::vector<torch::Tensor>& params) {
  auto grads = grads_of(params);
  if (grads.empty()) return torch::zeros({}, torch::kFloat32);
  return norm_of(grads);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  auto grads = grads_of(params);
  if (grads.empty()) return torch::zeros({}, torch::kFloat32);
  auto total = norm_of(grads);
  if (max_norm > 0) {
    // clamp instead of an `if`: the decision stays on the device
    auto coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    at::_foreach_mul_(grads, coef.to(grads.front().dtype()));
  }
  return total;
}

}  // namespace trainer::engine
