// Optimizer and RNG state through named tensors: a restored optimizer continues bitwise like the original.
#include <catch2/catch.hpp>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "engine/optim/train_state.hpp"

using namespace trainer;

namespace {

struct TinyNet : torch::nn::Module {
  explicit TinyNet(int64_t hidden = 8) {
    fc1 = register_module("fc1", torch::nn::Linear(4, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

std::unique_ptr<torch::optim::Optimizer> make_opt(const std::string& kind, TinyNet& net) {
  if (kind == "sgd") return std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  return std::make_unique<torch::optim::AdamW>(net.parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.1));
}

void train_steps(TinyNet& net, torch::optim::Optimizer& opt, int n, int64_t seed) {
  torch::manual_seed(seed);
  for (int i = 0; i < n; ++i) {
    auto x = torch::randn({5, 4});
    opt.zero_grad();
    net.forward(x).square().mean().backward();
    opt.step();
  }
}

void copy_params(TinyNet& from, TinyNet& to) {
  torch::NoGradGuard ng;
  auto src = from.parameters();
  auto dst = to.parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
}

}  // namespace

TEST_CASE("train state: a restored optimizer continues bitwise like the original", "[unit]") {
  for (const std::string kind : {"sgd", "adamw"}) {
    INFO(kind);
    torch::manual_seed(1);
    TinyNet a, b;
    auto opt_a = make_opt(kind, a);
    train_steps(a, *opt_a, 3, 10);
    auto saved = engine::optimizer_state_tensors(*opt_a, a);
    CHECK(saved.size() == (kind == "sgd" ? 4u : 12u));  // 4 parameters x (momentum | step, exp_avg, exp_avg_sq)
    CHECK(saved.front().first == (kind == "sgd" ? "fc1.weight.momentum_buffer" : "fc1.weight.step"));
    copy_params(a, b);
    auto opt_b = make_opt(kind, b);
    engine::load_optimizer_state(*opt_b, b, saved);
    train_steps(a, *opt_a, 2, 20);
    train_steps(b, *opt_b, 2, 20);
    auto pa = a.parameters(), pb = b.parameters();
    for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
  }
}

TEST_CASE("train state: optimizer state of another model is refused with the names", "[unit]") {
  TinyNet a, wider(16);
  auto opt_a = make_opt("sgd", a);
  train_steps(a, *opt_a, 1, 1);
  auto saved = engine::optimizer_state_tensors(*opt_a, a);
  auto opt_w = make_opt("sgd", wider);
  try {
    engine::load_optimizer_state(*opt_w, wider, saved);
    FAIL("loaded mismatched optimizer state");
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    CHECK_THAT(msg, Catch::StartsWith("optimizer state does not match this model/optimizer:"));
    CHECK_THAT(msg, Catch::Contains("fc1.weight.momentum_buffer: shape [8, 4], parameter has [16, 4]"));
  }
  saved.emplace_back("fc9.weight.momentum_buffer", torch::zeros({1}));
  auto opt_a2 = make_opt("sgd", a);
  CHECK_THROWS_WITH(engine::load_optimizer_state(*opt_a2, a, saved),
                    Catch::Contains("fc9.weight.momentum_buffer: no such parameter state in this optimizer"));
}

TEST_CASE("train state: a parameter whose optimizer state is missing is warned about by name", "[unit]") {
  TinyNet a;
  auto opt_a = make_opt("sgd", a);
  train_steps(a, *opt_a, 1, 1);
  auto saved = engine::optimizer_state_tensors(*opt_a, a);
  std::erase_if(saved, [](const auto& t) { return t.first == "fc2.bias.momentum_buffer"; });
  std::ostringstream out;
  auto before = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)));
  auto opt_b = make_opt("sgd", a);
  engine::load_optimizer_state(*opt_b, a, saved);  // the old reader took this in silence
  spdlog::set_default_logger(before);
  CHECK_THAT(out.str(), Catch::Contains("the optimizer state has no entry for 1 trainable parameter(s): fc2.bias;"));
  CHECK(opt_b->state().size() == 3);
  // nothing stepped at all (a checkpoint of step 0, SGD without momentum): no warning
  std::ostringstream quiet;
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(quiet)));
  auto opt_c = make_opt("sgd", a);
  engine::load_optimizer_state(*opt_c, a, {});
  spdlog::set_default_logger(before);
  CHECK(quiet.str().empty());
}

TEST_CASE("train state: the CPU RNG stream resumes where it was saved", "[unit]") {
  torch::manual_seed(3);
  torch::rand({7});
  auto state = engine::rng_state_tensors(torch::kCPU);
  REQUIRE(state.size() == 1);
  auto expected = torch::rand({16});
  torch::manual_seed(4);
  engine::restore_rng_state(state, torch::kCPU);
  CHECK(torch::equal(torch::rand({16}), expected));
}
