// train.ema: the shadow's update against its closed form, `every`, buffers, and the run's randomness.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <string>

#include "config/config.hpp"
#include "engine/step/ema.hpp"
#include "io/safetensors.hpp"

using namespace trainer;

namespace {

config::RunConfig ema_test_config(double decay, int64_t every) {
  config::RunConfig cfg;
  cfg.model.arch = "resnet";
  cfg.model.depth = 8;
  cfg.model.stem = "cifar";
  cfg.model.in_channels = 1;
  cfg.model.num_classes = 4;
  cfg.model.width = 0.25;
  cfg.train.ema.decay = decay;
  cfg.train.ema.every = every;
  return cfg;
}

std::map<std::string, torch::Tensor> ema_state_copy(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, t] : io::named_state(m)) out[name] = t.detach().clone();
  return out;
}

}  // namespace

TEST_CASE("EMA: the shadow starts as the weights and follows decay x shadow + (1 - decay) x weights", "[unit]") {
  torch::manual_seed(1);
  models::ModelRegistry registry;
  models::register_builtin_models(registry);
  const auto cfg = ema_test_config(0.75, 2);
  auto live = registry.create(cfg.model);
  auto ema = engine::make_ema(cfg, *live, torch::Device(torch::kCPU));
  const auto start = ema_state_copy(ema->model());
  for (auto& [name, t] : io::named_state(*live)) REQUIRE(torch::equal(start.at(name), t));

  {  // the trained weights move: every float tensor (parameters, BatchNorm statistics) and the counters
    torch::NoGradGuard ng;
    for (auto& [name, t] : io::named_state(*live)) {
      if (t.is_floating_point()) t.add_(torch::rand_like(t));
      else t.add_(3);
    }
  }
  const auto moved = ema_state_copy(*live);
  ema->after_step(1, 100);  // every 2: no update after step 1
  for (auto& [name, t] : io::named_state(ema->model())) REQUIRE(torch::equal(t, start.at(name)));
  ema->after_step(2, 100);
  int64_t floats = 0, ints = 0;
  for (auto& [name, t] : io::named_state(ema->model())) {
    INFO(name);
    if (t.is_floating_point()) {
      ++floats;
      const auto want = start.at(name).to(torch::kFloat64) * 0.75 + moved.at(name).to(torch::kFloat64) * 0.25;
      CHECK(torch::allclose(t.to(torch::kFloat64), want, 1e-6, 1e-7));
      CHECK_FALSE(torch::equal(t, moved.at(name)));
    } else {
      ++ints;
      CHECK(torch::equal(t, moved.at(name)));  // num_batches_tracked: copied, not averaged
    }
  }
  int64_t counters = 0;
  for (auto& [name, t] : start) counters += name.ends_with("num_batches_tracked") ? 1 : 0;
  CHECK(floats > 10);
  CHECK(counters > 0);
  CHECK(ints == counters);  // the integer tensors are exactly the BatchNorm counters
}

TEST_CASE("EMA: building the shadow leaves torch's generator where it was", "[unit]") {
  models::ModelRegistry registry;
  models::register_builtin_models(registry);
  const auto cfg = ema_test_config(0.9, 1);
  torch::manual_seed(7);
  auto live = registry.create(cfg.model);
  const auto expected = [] {
    auto g = at::detail::getDefaultCPUGenerator();
    const auto saved = g.get_state();
    auto draw = torch::rand({16});
    g.set_state(saved);
    return draw;
  }();
  auto ema = engine::make_ema(cfg, *live, torch::Device(torch::kCPU));
  CHECK(torch::equal(torch::rand({16}), expected));  // the run's later draws (dropout, ...) are unchanged
}

TEST_CASE("EMA warm-up: update n decays by min(decay, 1 - (1 + n)^(-2/3)), counted in updates", "[unit]") {
  torch::manual_seed(2);
  models::ModelRegistry registry;
  models::register_builtin_models(registry);
  auto cfg = ema_test_config(0.999, 2);
  auto live = registry.create(cfg.model);
  const auto plain = engine::make_ema(cfg, *live, torch::Device(torch::kCPU));
  CHECK(plain->decay_at(2, 100) == 0.999);
  cfg.train.ema.warmup = true;
  const auto warm = engine::make_ema(cfg, *live, torch::Device(torch::kCPU));
  CHECK(warm->decay_at(2, 100) == Approx(1 - std::pow(2.0, -2.0 / 3.0)));  // the first update (n 1): 0.370
  CHECK(warm->decay_at(20, 100) == Approx(1 - std::pow(11.0, -2.0 / 3.0)));  // n 10: 0.798
  CHECK(warm->decay_at(2 * 100000, 1000000) == 0.999);  // capped: 1 - 100001^(-2/3) = 0.99954 > 0.999
  // the first update takes 63 % of the weights' move
  const auto start = ema_state_copy(warm->model());
  {
    torch::NoGradGuard ng;
    for (auto& [name, t] : io::named_state(*live))
      if (t.is_floating_point()) t.add_(1.0);
  }
  warm->after_step(2, 100);
  const double d = 1 - std::pow(2.0, -2.0 / 3.0);
  for (auto& [name, t] : io::named_state(warm->model())) {
    if (!t.is_floating_point()) continue;
    INFO(name);
    CHECK(torch::allclose(t.to(torch::kFloat64), start.at(name).to(torch::kFloat64) + (1 - d), 1e-6, 1e-6));
  }
}

TEST_CASE("EMA lookahead: decay x (t/T)^3, the weights become the shadow, and the last step always updates", "[unit]") {
  torch::manual_seed(3);
  models::ModelRegistry registry;
  models::register_builtin_models(registry);
  auto cfg = ema_test_config(0.8, 4);
  cfg.train.ema.lookahead = true;
  auto live = registry.create(cfg.model);
  auto ema = engine::make_ema(cfg, *live, torch::Device(torch::kCPU));
  CHECK(ema->decay_at(4, 10) == Approx(0.8 * 0.4 * 0.4 * 0.4));
  CHECK(ema->decay_at(10, 10) == Approx(0.8));
  auto move = [&] {
    torch::NoGradGuard ng;
    for (auto& [name, t] : io::named_state(*live)) {
      if (t.is_floating_point()) t.add_(torch::rand_like(t));
      else t.add_(1);
    }
  };
  // each update: shadow = d x shadow + (1 - d) x weights, then weights = shadow; counters copied
  auto check_update = [&](int64_t step, const std::map<std::string, torch::Tensor>& before,
                          const std::map<std::string, torch::Tensor>& moved) {
    const double d = 0.8 * std::pow(static_cast<double>(step) / 10, 3);
    auto shadow = ema_state_copy(ema->model());
    for (auto& [name, t] : io::named_state(*live)) {
      INFO(name << " after step " << step);
      CHECK(torch::equal(t, shadow.at(name)));
      if (!t.is_floating_point()) {
        CHECK(torch::equal(t, moved.at(name)));
        continue;
      }
      const auto want = before.at(name).to(torch::kFloat64) * d + moved.at(name).to(torch::kFloat64) * (1 - d);
      CHECK(torch::allclose(t.to(torch::kFloat64), want, 1e-6, 1e-7));
      CHECK_FALSE(torch::equal(t, moved.at(name)));
    }
  };
  const auto start = ema_state_copy(*live);
  move();
  const auto moved1 = ema_state_copy(*live);
  ema->after_step(3, 10);  // not an update: the weights stay as trained
  for (auto& [name, t] : io::named_state(*live)) REQUIRE(torch::equal(t, moved1.at(name)));
  ema->after_step(4, 10);
  check_update(4, start, moved1);
  const auto synced = ema_state_copy(*live);
  move();
  const auto moved2 = ema_state_copy(*live);
  ema->after_step(10, 10);  // 10 % 4 != 0, but the last step: the run ends on the average
  check_update(10, synced, moved2);
}
