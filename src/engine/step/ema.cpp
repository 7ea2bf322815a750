#include "engine/step/ema.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "io/weight_copy.hpp"

namespace trainer::engine {
namespace {

// Parameters then buffers, each registered tensor once (named_parameters dedupes a tied weight).
std::vector<torch::Tensor> ema_tensors(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m.named_parameters(/*recurse=*/true)) out.push_back(p.value());
  for (auto& b : m.named_buffers(/*recurse=*/true)) out.push_back(b.value());
  return out;
}

}  // namespace

Ema::Ema(const config::EmaConfig& cfg, models::Model& live, models::ModelPtr shadow, const DataParallel* parallel)
    : cfg_(cfg), live_(live), shadow_(std::move(shadow)), parallel_(parallel) {
  if (!(cfg_.decay > 0 && cfg_.decay < 1) || cfg_.every < 1)
    throw std::invalid_argument("train.ema: decay must be in (0, 1) and every >= 1");
  auto live_t = ema_tensors(live_), shadow_t = ema_tensors(*shadow_);
  if (live_t.size() != shadow_t.size())
    throw std::invalid_argument("train.ema: the shadow model does not have the model's parameters");
  for (size_t i = 0; i < live_t.size(); ++i) {
    if (!live_t[i].sizes().equals(shadow_t[i].sizes()) || live_t[i].scalar_type() != shadow_t[i].scalar_type())
      throw std::invalid_argument("train.ema: the shadow model's tensors differ from the model's");
    shadow_t[i].requires_grad_(false);  // never trained: its tensors only follow the live ones
    if (io::is_released(live_t[i])) {  // a pipeline rank's other stages: no values to follow
      io::release_weight(shadow_t[i]);
      continue;
    }
    auto& s = live_t[i].is_floating_point() ? shadow_float_ : shadow_other_;
    auto& l = live_t[i].is_floating_point() ? live_float_ : live_other_;
    s.push_back(shadow_t[i]);
    l.push_back(live_t[i]);
  }
  reset_from_live();
}

void Ema::reset_from_live() {
  FullParams whole(parallel_, /*write=*/false);  // dist.sharding full: the live weights, whole
  torch::NoGradGuard ng;
  for (size_t i = 0; i < shadow_float_.size(); ++i) shadow_float_[i].copy_(live_float_[i]);
  for (size_t i = 0; i < shadow_other_.size(); ++i) shadow_other_[i].copy_(live_other_[i]);
}

double Ema::decay_at(int64_t steps_done, int64_t total_steps) const {
  if (cfg_.lookahead) {  // airbench: 0.95^5 x (step / total_steps)^3 every 5 steps
    const double t = total_steps > 0 ? std::min(1.0, static_cast<double>(steps_done) / total_steps) : 1.0;
    return cfg_.decay * t * t * t;
  }
  if (!cfg_.warmup) return cfg_.decay;
  const double n = static_cast<double>(steps_done / cfg_.every);  // updates made, this one included
  return std::min(cfg_.decay, 1.0 - std::pow(1.0 + n, -2.0 / 3.0));
}

void Ema::after_step(int64_t steps_done, int64_t total_steps) {
  const bool last = cfg_.lookahead && steps_done >= total_steps;  // the run ends on the average
  if (steps_done % cfg_.every != 0 && !last) return;
  // dist.sharding full: a collective, on every rank alike; lookahead writes the weights back (each
  // rank's chunks are taken from the whole ones)
  FullParams whole(parallel_, /*write=*/cfg_.lookahead);
  torch::NoGradGuard ng;
  // lerp: shadow + (1 - decay) (weights - shadow), one multi-tensor kernel for all of them
  torch::_foreach_lerp_(shadow_float_, live_float_, 1.0 - decay_at(steps_done, total_steps));
  for (size_t i = 0; i < shadow_other_.size(); ++i) shadow_other_[i].copy_(live_other_[i]);
  if (cfg_.lookahead) torch::_foreach_copy_(live_float_, shadow_float_);
}

std::unique_ptr<Ema> make_ema(const config::RunConfig& cfg, models::Model& live, const torch::Device& device,
                              const DataParallel* parallel, const models::BuildContext& ctx) {
  auto gen = at::detail::getDefaultCPUGenerator();
  const auto saved = gen.get_state();  // the shadow's random init is overwritten: it must not shift the run's draws
  auto shadow_ctx = ctx;  // a pipeline rank's other stages: released before the shadow moves to the device
  shadow_ctx.before_move = [&live](models::Model& shadow) {
    auto live_t = ema_tensors(live), shadow_t = ema_tensors(shadow);
    for (size_t i = 0; i < live_t.size() && i < shadow_t.size(); ++i)
      if (io::is_released(live_t[i]) && live_t[i].sizes().equals(shadow_t[i].sizes())) io::release_weight(shadow_t[i]);
  };
  auto shadow = models::build_model_on(cfg.model, device, shadow_ctx);
  gen.set_state(saved);
  shadow->eval();  // it is only ever evaluated
  if (cfg.train.ema.lookahead)
    spdlog::info("train.ema: lookahead every {} step(s), decay {} x (step / total steps)^3; the weights become the "
                 "average at each update and at the last step",
                 cfg.train.ema.every, cfg.train.ema.decay);
  else
    spdlog::info("train.ema: decay {} every {} step(s), {}{}", cfg.train.ema.decay, cfg.train.ema.every,
                 cfg.train.ema.warmup ? "warmed up (min(decay, 1 - (1 + n)^(-2/3)) at update n)" : "no warm-up",
                 cfg.train.ema.eval ? "; evaluated beside the trained weights" : "");
  return std::make_unique<Ema>(cfg.train.ema, live, std::move(shadow), parallel);
}

}  // namespace trainer::engine
