// ViT: torchvision's names and shapes, its initialisation, input checks, checkpointing with dropout,
// bf16 autocast, FLOPs. The numerics against torchvision are in test_golden.cpp and tests/python.
#include <catch2/catch.hpp>

#include <ATen/autocast_mode.h>

#include "model_test_util.hpp"

using namespace trainer;

TEST_CASE("vit has torchvision's parameter names and shapes", "[unit]") {
  auto cfg = test::tiny_vit_cfg();
  auto p = test::make_model(cfg)->named_parameters();
  CHECK(p.size() == 32);
  const std::map<std::string, std::vector<int64_t>> want = {
      {"conv_proj.weight", {32, 3, 4, 4}},
      {"conv_proj.bias", {32}},
      {"class_token", {1, 1, 32}},
      {"encoder.pos_embedding", {1, 17, 32}},  // (16 / 4)^2 patches + the class token
      {"encoder.layers.encoder_layer_0.ln_1.weight", {32}},
      {"encoder.layers.encoder_layer_0.self_attention.in_proj_weight", {96, 32}},
      {"encoder.layers.encoder_layer_0.self_attention.in_proj_bias", {96}},
      {"encoder.layers.encoder_layer_1.self_attention.out_proj.weight", {32, 32}},
      {"encoder.layers.encoder_layer_1.ln_2.bias", {32}},
      {"encoder.layers.encoder_layer_1.mlp.0.weight", {64, 32}},
      {"encoder.layers.encoder_layer_1.mlp.3.weight", {32, 64}},
      {"encoder.layers.encoder_layer_1.mlp.3.bias", {32}},
      {"encoder.ln.weight", {32}},
      {"heads.head.weight", {10, 32}},
      {"heads.head.bias", {10}},
  };
  for (const auto& [name, shape] : want) {
    INFO(name);
    REQUIRE(p.contains(name));
    CHECK(p[name].sizes() == shape);
  }
  cfg.in_channels = 1;  // torchvision hard-wires 3: only conv_proj's input width changes
  CHECK(test::make_model(cfg)->named_parameters()["conv_proj.weight"].sizes() == std::vector<int64_t>{32, 1, 4, 4});
}

TEST_CASE("vit init is torchvision's: zero head and class token, N(0, 0.02) positions, xavier and trunc-normal", "[unit]") {
  auto cfg = test::tiny_vit_cfg();
  cfg.hidden_dim = 128;
  cfg.mlp_dim = 512;
  cfg.patch_size = 8;
  cfg.image_size = 64;
  auto p = test::make_model(cfg)->named_parameters();
  CHECK(torch::equal(p["heads.head.weight"], torch::zeros({10, 128})));
  CHECK(torch::equal(p["heads.head.bias"], torch::zeros({10})));
  CHECK(torch::equal(p["class_token"], torch::zeros({1, 1, 128})));
  CHECK(p["encoder.pos_embedding"].std().item<double>() == Approx(0.02).epsilon(0.03));
  // trunc_normal_(std = sqrt(1 / fan_in)), fan_in = 3 * 8 * 8; the [-2, 2] bounds are far out here
  CHECK(p["conv_proj.weight"].std().item<double>() == Approx(std::sqrt(1.0 / 192)).epsilon(0.03));
  CHECK(torch::equal(p["conv_proj.bias"], torch::zeros({128})));
  // xavier_uniform_: std = sqrt(2 / (fan_in + fan_out))
  CHECK(p["encoder.layers.encoder_layer_0.self_attention.in_proj_weight"].std().item<double>() ==
        Approx(std::sqrt(2.0 / (128 + 384))).epsilon(0.03));
  CHECK(p["encoder.layers.encoder_layer_1.mlp.0.weight"].std().item<double>() ==
        Approx(std::sqrt(2.0 / (128 + 512))).epsilon(0.03));
  CHECK(p["encoder.layers.encoder_layer_1.mlp.0.bias"].abs().max().item<double>() < 1e-5);  // N(0, 1e-6)
  CHECK(p["encoder.layers.encoder_layer_1.mlp.0.bias"].abs().max().item<double>() > 0);
  CHECK(torch::equal(p["encoder.layers.encoder_layer_0.self_attention.in_proj_bias"], torch::zeros({384})));
  CHECK(torch::equal(p["encoder.layers.encoder_layer_0.self_attention.out_proj.bias"], torch::zeros({128})));
  // nn.Linear's default for out_proj.weight: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  CHECK(p["encoder.layers.encoder_layer_0.self_attention.out_proj.weight"].abs().max().item<double>() <=
        1.0 / std::sqrt(128.0));
  CHECK(torch::equal(p["encoder.ln.weight"], torch::ones({128})));
}

TEST_CASE("vit refuses images of another shape and configs torchvision would refuse", "[unit]") {
  auto model = test::make_model(test::tiny_vit_cfg());
  CHECK(model->forward(torch::randn({2, 3, 16, 16})).sizes() == std::vector<int64_t>{2, 10});
  CHECK_THROWS_WITH(model->forward(torch::randn({2, 3, 32, 32})),
                    "vit expects images (B, 3, 16, 16) (model.in_channels, model.image_size), got [2, 3, 32, 32]");
  CHECK_THROWS_WITH(model->forward(torch::randn({2, 1, 16, 16})),
                    "vit expects images (B, 3, 16, 16) (model.in_channels, model.image_size), got [2, 1, 16, 16]");
  CHECK_THROWS_WITH(model->forward(torch::randn({3, 16, 16})),
                    "vit expects images (B, 3, 16, 16) (model.in_channels, model.image_size), got [3, 16, 16]");
  auto cfg = test::tiny_vit_cfg();
  cfg.patch_size = 5;
  CHECK_THROWS_WITH(test::make_model(cfg), "model.patch_size: 5 does not divide model.image_size 16 (the image is cut into whole patches)");
  cfg = test::tiny_vit_cfg();
  cfg.num_heads = 5;
  CHECK_THROWS_WITH(test::make_model(cfg), "model.num_heads: hidden_dim 32 is not divisible by num_heads 5");
}

TEST_CASE("vit activation checkpointing: gradients equal the plain path, also with dropout", "[unit]") {
  for (double dropout : {0.0, 0.2}) {
    INFO("dropout " << dropout);
    auto cfg = test::tiny_vit_cfg();
    cfg.dropout = dropout;
    cfg.attention_dropout = dropout;
    auto plain = test::make_model(cfg, 4);
    cfg.activation_checkpointing = true;
    auto ckpt = test::make_model(cfg, 4);
    auto x = torch::randn({3, 3, 16, 16});
    const auto head = 0.1 * torch::randn({10, 32});  // non-zero, so that every parameter gets a gradient
    for (auto& m : {plain, ckpt}) {
      torch::NoGradGuard no_grad;
      m->named_parameters()["heads.head.weight"].copy_(head);
    }
    for (auto& m : {plain, ckpt}) {
      torch::manual_seed(99);  // the same dropout masks in both forwards; the recompute must repeat them
      m->forward(x).logsumexp(-1).mean().backward();
    }
    auto pc = ckpt->named_parameters();
    double worst = 0, smallest = 1e9;
    for (const auto& p : plain->named_parameters()) {
      worst = std::max(worst, test::max_abs_diff(p.value().grad(), pc[p.key()].grad()));
      smallest = std::min(smallest, p.value().grad().abs().max().item<double>());
    }
    INFO("max grad diff " << worst);
    CHECK(worst <= 1e-6);
    CHECK(smallest > 0);  // every parameter took part
  }
}

TEST_CASE("activation checkpointing under bf16 autocast: the step after an update reads the updated weights, as "
          "the plain path does, bit for bit",
          "[unit]") {
  // a forward under autocast as the trainer's AutocastScope runs it: the cast cache lives while it does
  auto forward_loss = [](models::Model& m, const torch::Tensor& x) {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::increment_nesting();
    auto loss = m.forward(x).to(torch::kFloat).logsumexp(-1).mean();
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, false);
    return loss;
  };
  auto cfg = test::tiny_vit_cfg();
  auto plain = test::make_model(cfg, 4);
  cfg.activation_checkpointing = true;
  auto ckpt = test::make_model(cfg, 4);
  const auto head = 0.1 * torch::randn({10, 32});
  for (auto& m : {plain, ckpt}) {
    torch::NoGradGuard no_grad;
    m->named_parameters()["heads.head.weight"].copy_(head);
  }
  const auto x = torch::randn({3, 3, 16, 16});
  std::vector<torch::Tensor> losses[2];
  int i = 0;
  for (auto& m : {plain, ckpt}) {
    for (int step = 0; step < 3; ++step) {
      auto loss = forward_loss(*m, x);
      loss.backward();  // outside the forward's scope, as the trainer's step runs it
      losses[i].push_back(loss.detach());
      torch::NoGradGuard no_grad;
      for (auto& p : m->parameters()) {
        p.sub_(0.5 * p.grad());  // an update in place, as the optimizers make it
        p.mutable_grad().zero_();
      }
    }
    ++i;
  }
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step << ": plain " << losses[0][step].item<double>() << ", checkpointed "
                 << losses[1][step].item<double>());
    CHECK(torch::equal(losses[0][step], losses[1][step]));
  }
  CHECK(!torch::equal(losses[0][0], losses[0][1]));  // the updates moved the loss
}

TEST_CASE("vit trains under bf16 autocast: bf16 logits close to fp32, fp32 gradients, and auto takes math there", "[unit]") {
  auto cfg = test::tiny_vit_cfg();  // attention auto
  auto model = test::make_model(cfg, 5);
  cfg.attention = config::Attention::Math;
  auto math = test::make_model(cfg, 5);
  const auto head = 0.1 * torch::randn({10, 32});
  for (auto& m : {model, math}) {
    torch::NoGradGuard no_grad;
    m->named_parameters()["heads.head.weight"].copy_(head);
  }
  auto x = torch::randn({4, 3, 16, 16});
  auto ref = model->forward(x).detach();
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  auto logits = model->forward(x);
  auto math_logits = math->forward(x);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  CHECK(logits.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(logits, math_logits));  // auto = the explicit softmax on a CPU under autocast
  INFO("max |bf16 - fp32| " << test::max_abs_diff(logits, ref) << ", max |fp32| " << ref.abs().max().item<double>());
  CHECK(test::max_abs_diff(logits, ref) < 0.05 * std::max(1.0, ref.abs().max().item<double>()));
  logits.to(torch::kFloat).logsumexp(-1).mean().backward();
  for (const auto& p : model->parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().scalar_type() == torch::kFloat);
  }
}

TEST_CASE("vit FLOPs per sample: patch conv, attention and MLP per block, head", "[unit]") {
  auto cfg = test::tiny_vit_cfg();
  auto model = test::make_model(cfg);
  // N = 16 patches, S = 17 tokens, D = 32, M = 64, 2 layers, 10 classes
  const double N = 16, S = 17, D = 32, M = 64;
  const double block = 2 * S * D * 3 * D + 4 * S * S * D + 2 * S * D * D + 4 * S * D * M;
  const double forward = 2 * N * 3 * 16 * D + 2 * block + 2 * D * 10;
  CHECK(model->train_flops_per_sample({3, 16, 16}) == Approx(3 * forward));
  CHECK_THROWS_WITH(model->train_flops_per_sample({16}), "vit FLOPs need a (C, H, W) sample shape");
}
