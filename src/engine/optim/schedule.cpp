#include "engine/optim/schedule.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace trainer::engine {

int64_t total_optimizer_steps(const config::TrainConfig& t, int64_t batches_per_epoch) {
  if (t.max_steps > 0) return t.max_steps;
  const double micro = t.epochs * static_cast<double>(batches_per_epoch);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(micro / static_cast<double>(t.grad_accum) - 1e-9)));
}

void warn_if_warmup_clipped(const config::RunConfig& cfg, int64_t total_steps) {
  if (cfg.train.max_steps == 0 && cfg.schedule.warmup_steps > total_steps)
    spdlog::warn("schedule.warmup_steps {} is longer than the run ({} steps in train.epochs {}): the schedule clips "
                 "it to {}", cfg.schedule.warmup_steps, total_steps, cfg.train.epochs, total_steps);
}

LrSchedule::LrSchedule(const config::ScheduleConfig& cfg, double base_lr, int64_t total_steps)
    : cfg_(cfg), base_lr_(base_lr), total_steps_(total_steps) {
  if (cfg_.name == config::ScheduleKind::Step && cfg_.step_size <= 0) throw std::invalid_argument("schedule.step_size must be > 0");
}

double LrSchedule::lr_at(int64_t step) const {
  // a warmup longer than the run ends with it (the config says so at load, the Trainer for epochs)
  const int64_t w = std::min(cfg_.warmup_steps, std::max<int64_t>(total_steps_, 1));
  if (step < w) return base_lr_ * static_cast<double>(step + 1) / static_cast<double>(w);
  const double floor = base_lr_ * cfg_.min_lr_ratio;
  const int64_t since = step - w;
  using K = config::ScheduleKind;
  if (cfg_.name == K::Constant) return base_lr_;
  if (cfg_.name == K::Step) {
    double lr = base_lr_ * std::pow(cfg_.gamma, static_cast<double>(since / cfg_.step_size));
    return std::max(floor, lr);
  }
  const double p = std::clamp(static_cast<double>(since) / static_cast<double>(std::max<int64_t>(1, total_steps_ - w)),
                              0.0, 1.0);
  if (cfg_.name == K::Linear) return floor + (base_lr_ - floor) * (1.0 - p);
  return floor + (base_lr_ - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace trainer::engine
