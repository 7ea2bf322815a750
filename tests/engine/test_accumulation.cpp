// Gradient accumulation: 4 micro-batches of B/4 give the same gradients and the same update as one
// batch of B, on the GPT model (the mean over the step's samples is the mean of micro-batch means).
#include <catch2/catch.hpp>

#include "engine/optim/optim.hpp"
#include "engine/step/train_step.hpp"
#include "engine/optim/schedule.hpp"
#include "models/model.hpp"

using namespace trainer;
using namespace trainer::engine;

namespace {

config::ModelConfig tiny_gpt() {
  config::ModelConfig c;
  c.arch = "gpt";
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.dropout = 0.0;
  return c;
}

models::ModelPtr make_model() {
  models::ModelRegistry reg;
  models::register_builtin_models(reg);
  torch::manual_seed(42);  // both models draw the same initial weights
  return reg.create(tiny_gpt());
}

double max_abs_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

std::vector<torch::Tensor> grads(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> g;
  for (const auto& p : ps) g.push_back(p.grad().clone());
  return g;
}

std::vector<torch::Tensor> values(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> v;
  for (const auto& p : ps) v.push_back(p.detach().clone());
  return v;
}

}  // namespace

TEST_CASE("grad_accum 4 with batch B/4 equals grad_accum 1 with batch B on a GPT", "[unit]") {
  auto whole = make_model();
  auto split = make_model();
  auto pw = unique_parameters(*whole), ps = unique_parameters(*split);
  REQUIRE(max_abs_diff(values(pw), values(ps)) == 0.0);

  config::OptimConfig oc;  // SGD + momentum: the update is linear in the gradient, so 1e-5 is meaningful
  oc.lr = 0.1;
  auto opt_w = build_optimizer(oc, *whole), opt_s = build_optimizer(oc, *split);
  LossScaler off(LossScalerConfig{}, torch::kCPU);
  const auto dev = torch::Device(torch::kCPU);

  torch::manual_seed(7);
  for (int step = 0; step < 2; ++step) {
    auto x = torch::randint(0, 64, {8, 16}, torch::kInt64);  // (B, T)
    auto y = torch::randint(0, 64, {8, 16}, torch::kInt64);
    auto lw = forward_backward(*whole, x, y, 1, Precision::Fp32, dev, off);
    torch::Tensor ls_sum = torch::zeros({});
    for (int64_t m = 0; m < 4; ++m) {
      auto xs = x.slice(0, 2 * m, 2 * m + 2), ys = y.slice(0, 2 * m, 2 * m + 2);  // (B/4, T)
      ls_sum += forward_backward(*split, xs, ys, 4, Precision::Fp32, dev, off);
    }
    CHECK((ls_sum / 4).item<double>() == Approx(lw.item<double>()).epsilon(1e-6));
    CHECK(max_abs_diff(grads(pw), grads(ps)) < 1e-5);
    apply_gradients(*opt_w, off, pw, /*grad_clip=*/1.0, 0.1, true);
    apply_gradients(*opt_s, off, ps, /*grad_clip=*/1.0, 0.1, true);
    CHECK(max_abs_diff(values(pw), values(ps)) < 1e-5);
    for (const auto& p : pw) CHECK_FALSE(p.grad().defined());  // zero_grad(set_to_none)
  }
}

TEST_CASE("apply_gradients reports the pre-clip norm and sets the learning rate", "[unit]") {
  auto model = make_model();
  auto params = unique_parameters(*model);
  config::OptimConfig oc;
  auto opt = build_optimizer(oc, *model);
  LossScaler off(LossScalerConfig{}, torch::kCPU);
  auto x = torch::randint(0, 64, {2, 16}, torch::kInt64);
  forward_backward(*model, x, x, 1, Precision::Fp32, torch::kCPU, off);
  double sq = 0;
  for (const auto& p : params) sq += p.grad().pow(2).sum().item<double>();
  auto r = apply_gradients(*opt, off, params, 0.0, 0.05, /*need_norm=*/true);
  CHECK(r.stepped);
  CHECK(r.grad_norm.item<double>() == Approx(std::sqrt(sq)).epsilon(1e-5));
  CHECK(opt->param_groups()[0].options().get_lr() == 0.05);
}

TEST_CASE("total optimizer steps from epochs round up to whole steps", "[unit]") {
  config::TrainConfig t;
  t.epochs = 2.5;
  t.grad_accum = 4;
  // 2.5 x 10 = 25 micro-batches -> ceil(25 / 4) = 7 steps
  CHECK(trainer::engine::total_optimizer_steps(t, 10) == 7);
  t.grad_accum = 5;
  CHECK(trainer::engine::total_optimizer_steps(t, 10) == 5);
  t.max_steps = 3;
  t.epochs = 0;
  CHECK(trainer::engine::total_optimizer_steps(t, 10) == 3);
}
