// Optimizer construction: decay groups, tied weights once, and the first update against hand values.
#include <catch2/catch.hpp>

#include "engine/optim/optim.hpp"
#include "engine/optim/train_state.hpp"

#include <functional>

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

TEST_CASE("biases, norm weights and embeddings form the no-decay group, tied weights appear once", "[unit]") {
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
  c.name = config::OptimizerKind::Sgd;
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
  c.name = config::OptimizerKind::Sgd;
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
  c.name = config::OptimizerKind::Adamw;
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

TEST_CASE("set_learning_rate reaches every group, unknown optimizer lists the known ones", "[unit]") {
  TinyNet net;
  OptimConfig c;
  auto opt = build_optimizer(c, net);
  set_learning_rate(*opt, 0.123);
  for (auto& g : opt->param_groups()) CHECK(g.options().get_lr() == Approx(0.123));
  REQUIRE_THROWS_WITH(config::parse_enum<config::OptimizerKind>("lamb", "optimizer"),
                      "unknown optimizer 'lamb'; known: sgd, adamw");
}

namespace {

// Two nets with equal weights; `steps` updates from the same random gradients; returns the largest
// absolute weight difference. A gradient hook (`regrad`) may replace the gradients before each step.
double fused_vs_loop(OptimConfig c, int steps, const std::function<void(TinyNet&)>& regrad = {}) {
  torch::manual_seed(5);
  TinyNet a, b;
  {
    torch::NoGradGuard ng;
    auto pa = a.parameters(), pb = b.parameters();
    for (size_t i = 0; i < pa.size(); ++i) pb[i].copy_(pa[i]);
  }
  c.fused = true;
  auto fused = build_optimizer(c, a);
  c.fused = false;
  auto loop = build_optimizer(c, b);
  const bool is_fused = dynamic_cast<FusedSGD*>(fused.get()) != nullptr || dynamic_cast<FusedAdamW*>(fused.get()) != nullptr;
  REQUIRE(is_fused);
  REQUIRE(dynamic_cast<FusedSGD*>(loop.get()) == nullptr);
  REQUIRE(dynamic_cast<FusedAdamW*>(loop.get()) == nullptr);
  for (int s = 0; s < steps; ++s) {
    auto pa = a.parameters(), pb = b.parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      auto g = torch::randn_like(pa[i]);
      pa[i].mutable_grad() = g.clone();
      pb[i].mutable_grad() = g.clone();
    }
    if (regrad) regrad(a), regrad(b);
    fused->step();
    loop->step();
  }
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

}  // namespace

TEST_CASE("fused AdamW and SGD take the per-parameter loop's steps, to float rounding", "[unit]") {
  OptimConfig adamw;
  adamw.name = config::OptimizerKind::Adamw;
  adamw.lr = 0.01;
  adamw.weight_decay = 0.1;
  adamw.betas = {0.9, 0.95};
  const double d_adamw = fused_vs_loop(adamw, 6);
  INFO("AdamW max |diff| after 6 steps " << d_adamw);
  CHECK(d_adamw < 1e-6);

  OptimConfig sgd;
  sgd.name = config::OptimizerKind::Sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  sgd.nesterov = true;
  sgd.weight_decay = 5e-4;
  const double d_sgd = fused_vs_loop(sgd, 6);
  INFO("SGD max |diff| after 6 steps " << d_sgd);
  CHECK(d_sgd < 1e-6);

  sgd.momentum = 0;  // no buffers at all
  sgd.nesterov = false;
  CHECK(fused_vs_loop(sgd, 3) < 1e-6);
}

TEST_CASE("fused optimizers hand gradients laid out unlike their parameter to the loop", "[unit]") {
  // fc.weight is (2, 3) contiguous; a gradient with transposed strides cannot go through the kernel
  auto transposed_grad = [](TinyNet& n) {
    n.fc->weight.mutable_grad() = n.fc->weight.grad().t().contiguous().t();
    REQUIRE(!fused_update_supported(n.fc->weight));
    REQUIRE(fused_update_supported(n.fc->bias));
  };
  OptimConfig adamw;
  adamw.name = config::OptimizerKind::Adamw;
  adamw.lr = 0.01;
  adamw.weight_decay = 0.1;
  CHECK(fused_vs_loop(adamw, 4, transposed_grad) < 1e-6);
  OptimConfig sgd;
  sgd.momentum = 0.9;
  sgd.weight_decay = 0.01;
  CHECK(fused_vs_loop(sgd, 4, transposed_grad) < 1e-6);
}

TEST_CASE("fused optimizers take gradients whose strides differ only in dimensions of size 1", "[unit]") {
  // a channels-last conv weight of one input channel: autograd may hand back a gradient strided like a
  // contiguous tensor (the size-1 dimension's stride is free); the elements sit at the same offsets
  for (auto kind : {config::OptimizerKind::Sgd, config::OptimizerKind::Adamw}) {
    INFO(config::name_of(kind));
    torch::manual_seed(3);
    auto init = torch::randn({4, 1, 3, 3});
    auto make = [&] {
      auto m = std::make_shared<torch::nn::Module>();
      auto w = torch::empty({4, 1, 3, 3}, torch::TensorOptions().memory_format(torch::MemoryFormat::ChannelsLast));
      w.copy_(init);
      m->register_parameter("w", w);
      return m;
    };
    auto a = make(), b = make();
    REQUIRE(a->parameters()[0].strides() == torch::IntArrayRef({9, 1, 3, 1}));
    OptimConfig c;
    c.name = kind;
    c.lr = 0.05;
    c.momentum = 0.9;
    c.weight_decay = 0.01;
    c.fused = true;
    auto fused = build_optimizer(c, *a);
    c.fused = false;
    auto loop = build_optimizer(c, *b);
    auto* hooks = dynamic_cast<GraphableOptimizer*>(fused.get());
    REQUIRE(hooks != nullptr);
    for (int step = 0; step < 3; ++step) {
      auto g = torch::randn({4, 1, 3, 3});  // contiguous: strides (9, 9, 3, 1)
      a->parameters()[0].mutable_grad() = g.clone();
      b->parameters()[0].mutable_grad() = g.clone();
      CHECK(fused_update_supported(a->parameters()[0]));
      fused->step();
      loop->step();
      CHECK(hooks->last_step_fused());
    }
    CHECK((a->parameters()[0] - b->parameters()[0]).abs().max().item<double>() < 1e-6);
  }
  // a size-1 dimension does not excuse a real difference elsewhere
  auto p = torch::empty({4, 2, 3, 3}, torch::TensorOptions().memory_format(torch::MemoryFormat::ChannelsLast));
  p.mutable_grad() = torch::zeros({4, 2, 3, 3});
  CHECK_FALSE(fused_update_supported(p));
}

TEST_CASE("fused AdamW resumes from saved state exactly (its step counters follow the loaded state)", "[unit]") {
  OptimConfig c;
  c.name = config::OptimizerKind::Adamw;
  c.lr = 0.01;
  c.weight_decay = 0.1;
  torch::manual_seed(9);
  std::vector<std::vector<torch::Tensor>> grads;  // per step, per parameter
  TinyNet ref;
  for (int s = 0; s < 4; ++s) {
    grads.emplace_back();
    for (auto& p : ref.parameters()) grads.back().push_back(torch::randn_like(p));
  }
  auto init = [&](TinyNet& n) {
    torch::NoGradGuard ng;
    auto pr = ref.parameters(), pn = n.parameters();
    for (size_t i = 0; i < pr.size(); ++i) pn[i].copy_(pr[i]);
  };
  auto run = [&](TinyNet& n, torch::optim::Optimizer& opt, int from, int to) {
    for (int s = from; s < to; ++s) {
      auto ps = n.parameters();
      for (size_t i = 0; i < ps.size(); ++i) ps[i].mutable_grad() = grads[s][i].clone();
      opt.step();
    }
  };
  TinyNet straight, resumed;
  init(straight);
  init(resumed);
  auto opt_straight = build_optimizer(c, straight);
  run(straight, *opt_straight, 0, 4);

  auto first = build_optimizer(c, resumed);
  run(resumed, *first, 0, 2);
  auto saved = optimizer_state_tensors(*first, resumed);
  c.fused = false;  // two steps with the loop in between: the counters must follow the state, not themselves
  auto middle = build_optimizer(c, resumed);
  load_optimizer_state(*middle, resumed, saved);
  run(resumed, *middle, 2, 3);
  saved = optimizer_state_tensors(*middle, resumed);
  c.fused = true;
  auto second = build_optimizer(c, resumed);
  load_optimizer_state(*second, resumed, saved);
  run(resumed, *second, 3, 4);
  for (auto& [name, t] : optimizer_state_tensors(*second, resumed))
    if (name.ends_with(".step")) CHECK(t.item<int64_t>() == 4);
  auto ps = straight.parameters(), pr = resumed.parameters();
  for (size_t i = 0; i < ps.size(); ++i) CHECK((ps[i] - pr[i]).abs().max().item<double>() < 1e-6);
}
