#include <catch2/catch.hpp>

#include "engine/optim/grad_clip.hpp"

using namespace trainer::engine;

namespace {
std::vector<torch::Tensor> params_with_grads() {
  auto a = torch::zeros({2}, torch::requires_grad());
  auto b = torch::zeros({1}, torch::requires_grad());
  auto c = torch::zeros({3}, torch::requires_grad());  // no gradient: ignored
  a.mutable_grad() = torch::tensor({3.0f, 0.0f});
  b.mutable_grad() = torch::tensor({4.0f});
  return {a, b, c};
}
}  // namespace

TEST_CASE("global grad norm is the 2-norm over every gradient", "[unit]") {
  auto ps = params_with_grads();
  CHECK(global_grad_norm(ps).item<double>() == Approx(5.0));
}

TEST_CASE("clipping scales the gradients to the max norm and returns the norm before", "[unit]") {
  auto ps = params_with_grads();
  auto n = clip_grad_norm(ps, 1.0);
  CHECK(n.item<double>() == Approx(5.0));
  CHECK(ps[0].grad()[0].item<double>() == Approx(3.0 / (5.0 + 1e-6)));
  CHECK(ps[1].grad()[0].item<double>() == Approx(4.0 / (5.0 + 1e-6)));
  CHECK(global_grad_norm(ps).item<double>() == Approx(1.0));
}

TEST_CASE("clipping leaves gradients under the max norm alone", "[unit]") {
  auto ps = params_with_grads();
  clip_grad_norm(ps, 10.0);
  CHECK(ps[0].grad()[0].item<float>() == 3.0f);
  clip_grad_norm(ps, 0.0);  // off
  CHECK(ps[1].grad()[0].item<float>() == 4.0f);
}
