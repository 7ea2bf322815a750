#include "engine/optim/loss_scaler.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace trainer::engine {

LossScalerConfig run_loss_scaler_config(bool fp16) {
  LossScalerConfig c;
  c.enabled = fp16;
  const char* v = std::getenv("TRAINER_INJECT_LOSS_SCALE");
  if (!v) return c;
  double s = 0;
  char tail = 0;
  if (std::sscanf(v, "%lf%c", &s, &tail) != 1 || !std::isfinite(s) || s <= 0)
    throw std::invalid_argument(std::string("TRAINER_INJECT_LOSS_SCALE: '") + v + "' is not a positive scale (65536, ...)");
  c.enabled = true;
  c.init_scale = s;
  return c;
}

LossScaler::LossScaler(LossScalerConfig cfg, const torch::Device& device) : cfg_(cfg) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  scale_ = torch::full({1}, cfg_.init_scale, f32);
  growth_tracker_ = torch::zeros({1}, f32.dtype(torch::kInt32));
  found_inf_ = torch::zeros({1}, f32);
}

torch::Tensor LossScaler::scale_loss(const torch::Tensor& loss) const {
  if (!cfg_.enabled) return loss;
  return loss * scale_.to(loss.dtype());
}

void LossScaler::unscale(const std::vector<torch::Tensor>& params) {
  if (!cfg_.enabled) return;
  found_inf_.zero_();
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  // inv_scale in fp64 on the host would lose nothing, but the op wants a float tensor on the grads' device
  auto inv_scale = scale_.reciprocal();
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
}

bool LossScaler::step(torch::optim::Optimizer& opt) {
  if (cfg_.enabled && found_inf_.item<float>() != 0.0f) return false;
  opt.step();
  return true;
}

void LossScaler::update() {
  if (!cfg_.enabled) return;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, cfg_.growth_factor, cfg_.backoff_factor,
                         cfg_.growth_interval);
}

LossScalerState LossScaler::state() const {
  return LossScalerState{scale_.item<double>(), growth_tracker_.item<int64_t>()};
}

void LossScaler::load_state(const LossScalerState& s) {
  scale_.fill_(s.scale);
  growth_tracker_.fill_(s.growth_tracker);
}

}  // namespace trainer::engine
