// Parameter groups (engine/optim/param_groups.hpp): optim.groups, optim.layer_decay, frozen parameters, and
// the learning rate each group steps with.
#include <catch2/catch.hpp>

#include "engine/optim/optim.hpp"
#include "engine/optim/param_groups.hpp"
#include "models/model.hpp"

using namespace trainer;
using namespace trainer::engine;

namespace {

struct GroupsNet : torch::nn::Module {
  GroupsNet() {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    head = register_module("head", torch::nn::Linear(2, 2));
  }
  torch::nn::Linear fc{nullptr}, head{nullptr};
};

// The group index and learning rate of each parameter, by name.
std::map<std::string, std::pair<size_t, double>> lr_by_name(torch::optim::Optimizer& opt, const torch::nn::Module& m) {
  std::map<const void*, std::string> names;
  for (const auto& p : m.named_parameters()) names[p.value().unsafeGetTensorImpl()] = p.key();
  std::map<std::string, std::pair<size_t, double>> out;
  for (size_t g = 0; g < opt.param_groups().size(); ++g)
    for (const auto& p : opt.param_groups()[g].params())
      out[names.at(p.unsafeGetTensorImpl())] = {g, opt.param_groups()[g].options().get_lr()};
  return out;
}

}  // namespace

TEST_CASE("optim.groups: first match wins, the rest keep the defaults, lr follows the schedule in proportion", "[unit]") {
  for (bool fused : {true, false}) {
    INFO("fused " << fused);
    GroupsNet net;
    config::OptimConfig c;
    c.lr = 0.1;
    c.momentum = 0;
    c.weight_decay = 0.5;
    c.fused = fused;
    c.groups = {{"^fc\\.", 0.05, std::nullopt}, {"fc|head\\.bias", std::nullopt, 0.0}};
    auto opt = build_optimizer(c, net);
    // 0: decay defaults (head.weight), 1: no-decay defaults (head.bias: wd 0 anyway), 2: fc.weight, 3: fc.bias
    REQUIRE(opt->param_groups().size() == 4);
    set_learning_rate(*opt, 0.2);  // the schedule doubles optim.lr: every group doubles
    auto lr = lr_by_name(*opt, net);
    CHECK(lr.at("head.weight") == std::pair<size_t, double>{0, 0.2});
    CHECK(lr.at("head.bias") == std::pair<size_t, double>{1, 0.2});
    CHECK(lr.at("fc.weight") == std::pair<size_t, double>{2, 0.1});
    CHECK(lr.at("fc.bias") == std::pair<size_t, double>{3, 0.1});
    CHECK_FALSE(uniform_learning_rate(*opt));
    // one SGD step: p - lr * (g + wd * p), with the group's lr and weight decay
    {
      torch::NoGradGuard ng;
      for (auto& p : net.parameters()) {
        p.fill_(1.0);
        p.mutable_grad() = torch::full_like(p, 0.5);
      }
    }
    opt->step();
    CHECK(net.head->weight.allclose(torch::full_like(net.head->weight, 1 - 0.2 * (0.5 + 0.5))));
    CHECK(net.head->bias.allclose(torch::full_like(net.head->bias, 1 - 0.2 * 0.5)));
    CHECK(net.fc->weight.allclose(torch::full_like(net.fc->weight, 1 - 0.1 * (0.5 + 0.5))));
    CHECK(net.fc->bias.allclose(torch::full_like(net.fc->bias, 1 - 0.1 * 0.5)));
  }
}

TEST_CASE("frozen parameters are in no optimizer group, and without groups the layout is the old two groups", "[unit]") {
  GroupsNet net;
  net.fc->weight.set_requires_grad(false);
  net.fc->bias.set_requires_grad(false);
  config::OptimConfig c;
  auto opt = build_optimizer(c, net);
  REQUIRE(opt->param_groups().size() == 2);
  auto lr = lr_by_name(*opt, net);
  CHECK(lr.size() == 2);
  CHECK(lr.count("head.weight") == 1);
  CHECK(lr.count("fc.weight") == 0);
  CHECK(uniform_learning_rate(*opt));
}

TEST_CASE("optim.layer_decay scales the model's blocks by depth (its units: vit and gpt blocks, resnet stages)", "[unit]") {
  config::ModelConfig g;
  g.arch = "gpt";
  g.vocab_size = 32, g.block_size = 8, g.n_layer = 4, g.n_head = 2, g.n_embd = 8;
  const LayerDepths gpt(*models::builtin_models().create(g));
  CHECK(gpt.blocks() == 4);
  CHECK(gpt.of("transformer.wte.weight") == 0);
  CHECK(gpt.of("transformer.wpe.weight") == 0);
  CHECK(gpt.of("transformer.h.3.attn.c_attn.weight") == 4);
  CHECK(gpt.of("transformer.ln_f.weight") == -1);
  config::ModelConfig r;
  r.arch = "resnet";
  r.depth = 8, r.stem = "cifar", r.in_channels = 1;
  const LayerDepths resnet(*models::builtin_models().create(r));
  CHECK(resnet.blocks() == 3);
  CHECK(resnet.of("conv1.weight") == 0);
  CHECK(resnet.of("layer2.0.conv1.weight") == 2);
  CHECK(resnet.of("fc.weight") == -1);
  torch::nn::Linear plain(2, 2);
  CHECK(LayerDepths(*plain).blocks() == 0);  // not a models::Model: no blocks

  config::ModelConfig m;
  m.arch = "vit";
  m.in_channels = 3;
  m.num_classes = 4;
  m.image_size = 8;
  m.patch_size = 4;
  m.num_layers = 2;
  m.num_heads = 2;
  m.hidden_dim = 8;
  m.mlp_dim = 16;
  auto vit = models::builtin_models().create(m);
  config::OptimConfig c;
  c.name = config::OptimizerKind::Adamw;
  c.lr = 1.0;
  c.layer_decay = 0.5;
  c.weight_decay = 0.1;
  auto opt = build_optimizer(c, *vit);
  set_learning_rate(*opt, 1.0);
  auto lr = lr_by_name(*opt, *vit);
  CHECK(lr.at("conv_proj.weight").second == 0.125);  // embeddings: 0.5^(2 + 1)
  CHECK(lr.at("class_token").second == 0.125);
  CHECK(lr.at("encoder.layers.encoder_layer_0.mlp.0.weight").second == 0.25);
  CHECK(lr.at("encoder.layers.encoder_layer_1.mlp.0.weight").second == 0.5);
  CHECK(lr.at("heads.head.weight").second == 1.0);
  CHECK(lr.at("encoder.ln.weight").second == 1.0);
  // decay and no-decay stay apart at each depth
  CHECK(lr.at("encoder.layers.encoder_layer_0.mlp.0.weight").first != lr.at("encoder.layers.encoder_layer_0.mlp.0.bias").first);
}
