// Each model can memorise one small batch: loss below 0.05 within 200 steps.
#include <catch2/catch.hpp>

#include "model_test_util.hpp"

using namespace trainer;

namespace {
template <typename LossFn>
std::pair<double, int> overfit(models::Model& m, LossFn loss_fn, double lr) {
  torch::optim::Adam opt(m.parameters(), torch::optim::AdamOptions(lr));
  double loss = 1e9;
  for (int step = 1; step <= 200; ++step) {
    opt.zero_grad();
    torch::Tensor l = loss_fn();
    l.backward();
    opt.step();
    loss = l.item<double>();
    if (loss < 0.05) return {loss, step};
  }
  return {loss, 200};
}
}  // namespace

TEST_CASE("resnet overfits one batch", "[unit]") {
  torch::manual_seed(0);
  auto cfg = test::resnet_cfg(8, 4);
  auto model = test::make_model(cfg);
  auto x = torch::randn({8, 3, 16, 16});
  auto y = torch::tensor({0, 1, 2, 3, 0, 1, 2, 3});
  auto [loss, steps] = overfit(*model, [&] { return torch::nn::functional::cross_entropy(model->forward(x), y); }, 1e-2);
  INFO("loss " << loss << " after " << steps << " steps");
  CHECK(loss < 0.05);
}

TEST_CASE("gpt overfits one batch", "[unit]") {
  torch::manual_seed(0);
  auto cfg = test::tiny_gpt_cfg();
  auto model = test::make_model(cfg);
  auto idx = torch::randint(64, {4, 16});
  auto target = torch::randint(64, {4, 16});
  auto [loss, steps] = overfit(*model, [&] {
    return torch::nn::functional::cross_entropy(model->forward(idx).reshape({-1, 64}), target.reshape({-1}));
  }, 1e-2);
  INFO("loss " << loss << " after " << steps << " steps");
  CHECK(loss < 0.05);
}
