// ResNet: shapes, parameter counts and names as torchvision, init, channels_last, checkpointing.
#include <catch2/catch.hpp>

#include "model_test_util.hpp"
#include "test_util.hpp"

using namespace trainer;

TEST_CASE("resnet gives (B, num_classes) logits at every depth and both layouts", "[unit]") {
  torch::NoGradGuard no_grad;
  for (int64_t depth : {18, 34, 50, 101, 152, 8, 20, 56}) {
    INFO("depth " << depth);
    auto model = test::make_model(test::resnet_cfg(depth, 7));
    model->eval();
    CHECK(model->forward(torch::randn({2, 3, 32, 32})).sizes() == std::vector<int64_t>{2, 7});
  }
  auto cfg = test::resnet_cfg(18, 5);
  cfg.stem = "cifar";
  cfg.in_channels = 1;
  auto model = test::make_model(cfg);
  model->eval();
  CHECK(model->forward(torch::randn({3, 1, 28, 28})).sizes() == std::vector<int64_t>{3, 5});
}

TEST_CASE("resnet parameter counts equal torchvision's", "[unit]") {
  // torchvision.models.resnetN(num_classes=...) counted in Python (tests/reference/README.md)
  CHECK(test::make_model(test::resnet_cfg(18, 1000))->num_parameters() == 11'689'512);
  CHECK(test::make_model(test::resnet_cfg(50, 1000))->num_parameters() == 25'557'032);
  CHECK(test::make_model(test::resnet_cfg(34, 1000))->num_parameters() == 21'797'672);
  CHECK(test::make_model(test::resnet_cfg(101, 10))->num_parameters() == 42'520'650);
  CHECK(test::make_model(test::resnet_cfg(152, 10))->num_parameters() == 58'164'298);
  // CIFAR layout: torchvision BasicBlocks in 3 stages of 16/32/64 channels, 1x1 projection shortcuts
  CHECK(test::make_model(test::resnet_cfg(20, 10))->num_parameters() == 272'474);
  CHECK(test::make_model(test::resnet_cfg(56, 10))->num_parameters() == 855'770);
  CHECK(test::make_model(test::resnet_cfg(110, 10))->num_parameters() == 1'730'714);
}

TEST_CASE("resnet uses torchvision's parameter and buffer names", "[unit]") {
  auto r18 = test::make_model(test::resnet_cfg(18));
  auto state = io::named_state(*r18);
  std::map<std::string, torch::Tensor> m(state.begin(), state.end());
  CHECK(state.size() == 122);  // len(torchvision.models.resnet18().state_dict())
  for (const char* n : {"conv1.weight", "bn1.running_mean", "bn1.num_batches_tracked", "layer1.0.conv1.weight",
                        "layer2.0.downsample.0.weight", "layer4.1.bn2.running_var", "fc.weight", "fc.bias"})
    CHECK(m.count(n));
  CHECK(m["layer4.0.downsample.0.weight"].sizes() == std::vector<int64_t>{512, 256, 1, 1});
  CHECK_FALSE(m.count("layer1.0.downsample.0.weight"));
  auto r50 = test::make_model(test::resnet_cfg(50));
  auto p50 = r50->named_parameters();
  CHECK(p50["layer2.0.conv2.weight"].sizes() == std::vector<int64_t>{128, 128, 3, 3});  // stride sits here
  CHECK(p50["layer1.0.downsample.0.weight"].sizes() == std::vector<int64_t>{256, 64, 1, 1});
  CHECK(io::named_state(*r50).size() == 320);  // len(torchvision.models.resnet50().state_dict())
}

TEST_CASE("resnet init: He-normal fan_out convs, identity BatchNorm, zero_init_residual", "[unit]") {
  auto model = test::make_model(test::resnet_cfg(50));
  auto p = model->named_parameters();
  // layer3.0.conv2: 256 x 256 x 3 x 3, fan_out = 256 * 9 -> std sqrt(2 / 2304)
  const double std_want = std::sqrt(2.0 / (256.0 * 9.0));
  CHECK(p["layer3.0.conv2.weight"].std().item<double>() == Approx(std_want).epsilon(0.01));
  CHECK(torch::equal(p["bn1.weight"], torch::ones({64})));
  CHECK(torch::equal(p["bn1.bias"], torch::zeros({64})));
  CHECK(torch::equal(p["layer1.0.bn3.weight"], torch::ones({256})));

  auto cfg = test::resnet_cfg(50);
  cfg.zero_init_residual = true;
  auto z = test::make_model(cfg)->named_parameters();
  CHECK(torch::equal(z["layer1.0.bn3.weight"], torch::zeros({256})));
  CHECK(torch::equal(z["layer1.0.bn2.weight"], torch::ones({64})));
  auto cfg18 = test::resnet_cfg(18);
  cfg18.zero_init_residual = true;
  CHECK(torch::equal(test::make_model(cfg18)->named_parameters()["layer2.1.bn2.weight"], torch::zeros({128})));
}

TEST_CASE("resnet init is a function of the torch seed", "[unit]") {
  auto a = test::make_model(test::resnet_cfg(18), 7), b = test::make_model(test::resnet_cfg(18), 7);
  auto c = test::make_model(test::resnet_cfg(18), 8);
  CHECK(torch::equal(a->named_parameters()["layer3.1.conv1.weight"], b->named_parameters()["layer3.1.conv1.weight"]));
  CHECK_FALSE(torch::equal(a->named_parameters()["layer3.1.conv1.weight"], c->named_parameters()["layer3.1.conv1.weight"]));
}

TEST_CASE("resnet channels_last gives the contiguous model's outputs and gradients", "[unit]") {
  auto cfg = test::resnet_cfg(18);
  auto plain = test::make_model(cfg, 3);
  cfg.channels_last = true;
  auto cl = test::make_model(cfg, 3);
  CHECK(cl->named_parameters()["layer1.0.conv1.weight"].is_contiguous(at::MemoryFormat::ChannelsLast));
  auto x = torch::randn({4, 3, 32, 32});
  auto y_plain = plain->forward(x), y_cl = cl->forward(x);
  // Different convolution kernels sum in a different order: equal up to fp32 rounding, relative to the
  // scale. In train mode BatchNorm over 4 values (layer4 is 1x1 here) magnifies that rounding ~10x.
  auto rel = [](const torch::Tensor& a, const torch::Tensor& b) {
    return test::max_abs_diff(a, b) / b.abs().max().item<double>();
  };
  INFO("logits: relative diff " << rel(y_cl, y_plain));
  CHECK(rel(y_cl, y_plain) < 1e-4);
  y_plain.square().mean().backward();
  y_cl.square().mean().backward();
  for (const char* n : {"conv1.weight", "layer3.0.downsample.0.weight", "fc.weight"}) {
    auto gp = plain->named_parameters()[n].grad(), gc = cl->named_parameters()[n].grad();
    INFO(n << ": relative diff " << rel(gc, gp));
    CHECK(rel(gc, gp) < 1e-4);
  }
  // weights loaded from a file (contiguous) are made channels-last again
  auto f = io::load_safetensors([&] {
    auto path = (trainer::test::scratch_dir("resnet_cl") / "w.safetensors").string();
    io::save_safetensors(path, io::named_state(*plain));
    return path;
  }());
  io::load_state_into(*cl, f);
  torch::NoGradGuard no_grad;
  plain->eval();
  cl->eval();
  CHECK(test::max_abs_diff(plain->forward(x), cl->forward(x)) < 1e-5);
}

TEST_CASE("resnet activation checkpointing: same gradients, BatchNorm statistics updated once", "[unit]") {
  auto cfg = test::resnet_cfg(20);
  auto plain = test::make_model(cfg, 5);
  cfg.activation_checkpointing = true;
  auto ckpt = test::make_model(cfg, 5);
  auto x = torch::randn({4, 3, 16, 16});
  auto target = torch::tensor({0, 1, 2, 3});
  for (auto& m : {plain, ckpt}) torch::nn::functional::cross_entropy(m->forward(x), target).backward();
  auto pp = plain->named_parameters(), pc = ckpt->named_parameters();
  double worst = 0;
  for (const auto& p : pp) worst = std::max(worst, test::max_abs_diff(p.value().grad(), pc[p.key()].grad()));
  INFO("max grad diff " << worst);
  CHECK(worst <= 1e-6);
  auto bp = plain->named_buffers(), bc = ckpt->named_buffers();
  for (const auto& b : bp) {
    INFO(b.key());
    CHECK(torch::equal(b.value(), bc[b.key()]));  // num_batches_tracked == 1, not 2
  }
  CHECK(bc["layer2.1.bn1.num_batches_tracked"].item<int64_t>() == 1);
}

TEST_CASE("resnet FLOPs per sample", "[unit]") {
  // torchvision resnet50 at 224x224: 4.09 GMACs forward (8.18 GFLOPs); training is 3x that
  auto r50 = test::make_model(test::resnet_cfg(50, 1000));
  const double fwd = r50->train_flops_per_sample({3, 224, 224}) / 3.0;
  CHECK(fwd == Approx(2.0 * 4.089e9).epsilon(0.01));
  auto r18 = test::make_model(test::resnet_cfg(18, 1000));
  CHECK(r18->train_flops_per_sample({3, 224, 224}) / 3.0 == Approx(2.0 * 1.814e9).epsilon(0.01));
}

TEST_CASE("resnet rejects wrong input shapes and bad configs with clear messages", "[unit]") {
  auto model = test::make_model(test::resnet_cfg(18));
  CHECK_THROWS_WITH(model->forward(torch::randn({2, 1, 28, 28})),
                    "resnet expects images (B, 3, H, W), got [2, 1, 28, 28]");
  auto cfg = test::resnet_cfg(19);
  CHECK_THROWS_WITH(test::make_model(cfg), Catch::StartsWith("model.depth 19 is not a ResNet depth"));
  cfg = test::resnet_cfg(18);
  cfg.stem = "tiny";
  CHECK_THROWS_WITH(test::make_model(cfg), "model.stem 'tiny' is unknown; known: cifar, imagenet");
}

TEST_CASE("resnet channels_last restrides 1-channel weights so every activation stays channels-last", "[unit]") {
  // A (32, 1, 3, 3) stem weight is "contiguous" as NCHW and as channels-last alike; left NCHW-strided,
  // the stem convolution returns NCHW and every later layer pays a layout copy (measured: ~8 % of a
  // ResNet-8 step on Fashion-MNIST). Module.to(memory_format=channels_last) in PyTorch restrides it.
  auto cfg = test::resnet_cfg(8, 10);
  cfg.stem = "cifar";
  cfg.in_channels = 1;
  cfg.channels_last = true;
  auto model = test::make_model(cfg, 1);
  for (const auto& p : model->named_parameters())
    if (p.value().dim() == 4) {
      INFO(p.key() << " strides " << p.value().strides());
      CHECK(models::has_channels_last_strides(p.value()));
    }
  auto stem = model->named_parameters()["conv1.weight"];
  CHECK(stem.strides() == std::vector<int64_t>{9, 1, 3, 1});
  auto x = torch::randn({4, 1, 28, 28}).contiguous(at::MemoryFormat::ChannelsLast);
  CHECK(models::has_channels_last_strides(torch::conv2d(x, stem, {}, 1, 1)));
  // a NCHW-strided 1-channel tensor is not taken for channels-last, and the restriding keeps values
  auto w = torch::randn({32, 1, 3, 3});
  CHECK(w.is_contiguous(at::MemoryFormat::ChannelsLast));  // the ambiguity
  CHECK_FALSE(models::has_channels_last_strides(w));
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(1, 32, 3).bias(false));
  { torch::NoGradGuard ng; conv->weight.copy_(w); }
  models::to_channels_last(*conv);
  CHECK(models::has_channels_last_strides(conv->weight));
  CHECK(torch::equal(conv->weight, w));
}
