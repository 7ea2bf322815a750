// Optimizer construction: decay groups, tied weights once, and the first update against hand values.
#include <catch2/catch.hpp>

#include "engine/optim.hpp"

using namespace trainer::engine;
using trainer::config::OptimConfig;

namespace {

// A Linear (2-D weight decays, bias not), a LayerNorm (1-D: no decay), an Embedding (no decay) whose
// weight is also registered a second time, the way a GPT ties its output head to the token embedding.
struct TinyNet : torch::nn::Module {
  TinyNet() {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({2})));
    emb = register_module("emb", torch::nn::Embedding(5, 3));
    head_weight = register_parameter("head_weight", emb->weight);
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Embedding emb{nullptr};
  torch::Tensor head_weight;
};

void fill_all(TinyNet& net, double w, double g) {
  torch::NoGradGuard ng;
  for (auto& p : net.parameters()) {
    p.fill_(w);
    p.mutable_grad() = torch::full_like(p, g);
  }
}

}  // namespace

TEST_CASE("biases, norm weights and embeddings form the no-decay group; tied weights appear once", "[unit]") {
  TinyNet net;
  auto g = split_decay_groups(net, /*decay_norm_and_bias=*/false);
  CHECK(g.decay_names == std::vector<std::string>{"fc.weight"});
  // named_parameters() lists the root's own parameters before its children's, so the tied embedding
  // weight appears once, under its first name "head_weight", and still lands in the no-decay group
  CHECK(g.no_decay_names == std::vector<std::string>{"head_weight", "fc.bias", "norm.weight", "norm.bias"});
  auto all = split_decay_groups(net, /*decay_norm_and_bias=*/true);
  CHECK(all.decay_names.size() == 5);
  CHECK(all.no_decay.empty());
  CHECK(unique_parameters(net).size() == 5);
}

TEST_CASE("SGD with momentum and weight decay: first step on both groups", "[unit]") {
  TinyNet net;
  OptimConfig c;
  c.name = "sgd";
  c.lr = 0.1;
  c.momentum = 0.9;
  c.weight_decay = 0.5;
  auto opt = build_optimizer(c, net);
  REQUIRE(opt->param_groups().size() == 2);
  fill_all(net, 1.0, 2.0);
  opt->step();
  // decayed: p - lr * (g + wd * p) = 1 - 0.1 * (2 + 0.5) = 0.75; the first momentum buffer is the step itself
  CHECK(net.fc->weight[0][0].item<double>() == Approx(0.75));
  // no decay: 1 - 0.1 * 2 = 0.8
  CHECK(net.fc->bias[0].item<double>() == Approx(0.8));
  CHECK(net.emb->weight[0][0].item<double>() == Approx(0.8));
  CHECK(net.norm->weight[0].item<double>() == Approx(0.8));
}

TEST_CASE("SGD Nesterov first step adds momentum times the buffer", "[unit]") {
  TinyNet net;
  OptimConfig c;
  c.name = "sgd";
  c.lr = 0.1;
  c.momentum = 0.9;
  c.nesterov = true;
  auto opt = build_optimizer(c, net);
  fill_all(net, 1.0, 2.0);
  opt->step();
  // d = g + m * buf with buf = g on the first step: 1 - 0.1 * 2 * 1.9 = 0.62
  CHECK(net.fc->weight[0][0].item<double>() == Approx(0.62));
}

TEST_CASE("AdamW decays decoupled from the gradient and only on the decay group", "[unit]") {
  TinyNet net;
  OptimConfig c;
  c.name = "adamw";
  c.lr = 0.01;
  c.weight_decay = 0.1;
  c.eps = 1e-8;
  auto opt = build_optimizer(c, net);
  fill_all(net, 2.0, -3.0);
  opt->step();
  // first Adam step is lr * g / (|g| + eps) after bias correction; decay multiplies p by (1 - lr * wd)
  const double adam = 0.01 * (-3.0) / (3.0 + 1e-8);
  CHECK(net.fc->weight[0][0].item<double>() == Approx(2.0 * (1 - 0.01 * 0.1) - adam));
  CHECK(net.fc->bias[0].item<double>() == Approx(2.0 - adam));
  CHECK(net.emb->weight[1][2].item<double>() == Approx(2.0 - adam));
}

TEST_CASE("set_learning_rate reaches every group; unknown optimizer lists the known ones", "[unit]") {
  TinyNet net;
  OptimConfig c;
  auto opt = build_optimizer(c, net);
  set_learning_rate(*opt, 0.123);
  for (auto& g : opt->param_groups()) CHECK(g.options().get_lr() == Approx(0.123));
  c.name = "lamb";
  REQUIRE_THROWS_WITH(build_optimizer(c, net), "unknown optimizer 'lamb'; known: adamw, sgd");
}
