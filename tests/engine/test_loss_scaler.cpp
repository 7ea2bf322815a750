// Dynamic loss scaler on CPU tensors (the ATen AMP ops run on CPU in LibTorch 2.11).
#include <catch2/catch.hpp>

#include <limits>

#include "engine/optim/loss_scaler.hpp"

using namespace trainer::engine;

namespace {

struct Fixture {
  torch::nn::Linear net{torch::nn::LinearOptions(2, 1)};
  std::unique_ptr<torch::optim::SGD> opt;
  Fixture() {
    torch::manual_seed(0);
    net = torch::nn::Linear(torch::nn::LinearOptions(2, 1));
    opt = std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  torch::Tensor loss() { return net->forward(torch::tensor({{1.0f, 2.0f}})).sum(); }
  std::vector<torch::Tensor> params() { return net->parameters(); }
  torch::Tensor momentum(const torch::Tensor& p) {
    auto& s = static_cast<torch::optim::SGDParamState&>(*opt->state().at(p.unsafeGetTensorImpl()));
    return s.momentum_buffer().clone();
  }
};

LossScalerConfig enabled_cfg(double init, int64_t interval) {
  LossScalerConfig c;
  c.enabled = true;
  c.init_scale = init;
  c.growth_interval = interval;
  return c;
}

}  // namespace

TEST_CASE("loss scaler defaults are GradScaler's", "[unit]") {
  LossScalerConfig c;
  CHECK(c.init_scale == 65536.0);
  CHECK(c.growth_factor == 2.0);
  CHECK(c.backoff_factor == 0.5);
  CHECK(c.growth_interval == 2000);
}

TEST_CASE("scaled backward then unscale gives the unscaled gradients", "[unit]") {
  Fixture f;
  LossScaler s(enabled_cfg(1024.0, 2000), torch::kCPU);
  s.scale_loss(f.loss()).backward();
  CHECK(f.net->weight.grad()[0][0].item<float>() == Approx(1024.0f));
  s.unscale(f.params());
  // d(sum(w x + b))/dw = x = (1, 2), /db = 1
  CHECK(f.net->weight.grad()[0][1].item<float>() == Approx(2.0f));
  CHECK(f.net->bias.grad()[0].item<float>() == Approx(1.0f));
  CHECK(s.step(*f.opt));
}

TEST_CASE("an inf gradient skips the step, leaves weights and optimizer state alone and halves the scale", "[unit]") {
  Fixture f;
  LossScaler s(enabled_cfg(65536.0, 2000), torch::kCPU);
  // one clean step first, so there is optimizer state to protect
  s.scale_loss(f.loss()).backward();
  s.unscale(f.params());
  REQUIRE(s.step(*f.opt));
  s.update();
  f.opt->zero_grad();
  auto w_before = f.net->weight.detach().clone();
  auto b_before = f.net->bias.detach().clone();
  auto m_before = f.momentum(f.net->weight);

  s.scale_loss(f.loss()).backward();
  f.net->weight.mutable_grad()[0][1] = std::numeric_limits<float>::infinity();  // injected overflow
  s.unscale(f.params());
  CHECK_FALSE(s.step(*f.opt));
  s.update();
  CHECK(torch::equal(f.net->weight.detach(), w_before));
  CHECK(torch::equal(f.net->bias.detach(), b_before));
  CHECK(torch::equal(f.momentum(f.net->weight), m_before));
  CHECK(s.state() == LossScalerState{32768.0, 0});
}

TEST_CASE("a NaN gradient is caught like an inf", "[unit]") {
  Fixture f;
  LossScaler s(enabled_cfg(4.0, 2000), torch::kCPU);
  s.scale_loss(f.loss()).backward();
  f.net->bias.mutable_grad()[0] = std::numeric_limits<float>::quiet_NaN();
  s.unscale(f.params());
  CHECK_FALSE(s.step(*f.opt));
  s.update();
  CHECK(s.state().scale == 2.0);
}

TEST_CASE("the scale grows by 2 after growth_interval clean steps", "[unit]") {
  Fixture f;
  LossScaler s(enabled_cfg(8.0, 3), torch::kCPU);
  for (int i = 0; i < 3; ++i) {
    f.opt->zero_grad();
    s.scale_loss(f.loss()).backward();
    s.unscale(f.params());
    REQUIRE(s.step(*f.opt));
    s.update();
    if (i < 2) CHECK(s.state() == LossScalerState{8.0, i + 1});
  }
  CHECK(s.state() == LossScalerState{16.0, 0});
}

TEST_CASE("scaler state round-trips through load_state", "[unit]") {
  LossScaler s(enabled_cfg(65536.0, 2000), torch::kCPU);
  s.load_state(LossScalerState{512.0, 17});
  CHECK(s.state() == LossScalerState{512.0, 17});
  CHECK(s.scale_tensor().item<float>() == 512.0f);
}

TEST_CASE("a disabled scaler changes nothing and always steps", "[unit]") {
  Fixture f;
  LossScaler s(LossScalerConfig{}, torch::kCPU);
  auto l = f.loss();
  CHECK(torch::equal(s.scale_loss(l), l));
  l.backward();
  f.net->bias.mutable_grad()[0] = std::numeric_limits<float>::infinity();
  s.unscale(f.params());
  CHECK(f.net->weight.grad()[0][1].item<float>() == 2.0f);
  CHECK(s.step(*f.opt));
}
