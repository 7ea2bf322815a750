// Writes C++ models as safetensors plus their logits on a fixed input, for
// tests/python/test_models_interop.py, which loads them into torchvision / the nanoGPT reference with
// load_state_dict(strict=True) and compares the logits. Run by that script; harmless on its own.
#include <catch2/catch.hpp>

#include "model_test_util.hpp"
#include "test_util.hpp"
#include <fmt/format.h>

using namespace trainer;

TEST_CASE("interop export: resnet18 and gpt safetensors with reference logits", "[unit][interop]") {
  auto dir = test::scratch_dir("models_interop");
  torch::NoGradGuard no_grad;
  auto export_model = [&](const std::string& name, const config::ModelConfig& cfg, const torch::Tensor& input) {
    auto model = test::make_model(cfg, 123);
    model->eval();
    auto logits = model->forward(input);
    io::save_safetensors((dir / (name + ".safetensors")).string(), io::named_state(*model), {{"arch", cfg.arch}});
    io::save_safetensors((dir / (name + "_io.safetensors")).string(), {{"input", input}, {"logits", logits}});
  };
  {
    // train a few steps first so the BatchNorm running statistics are not the init values
    auto cfg = test::resnet_cfg(18, 10);
    auto model = test::make_model(cfg, 123);
    auto x = torch::randn({2, 3, 32, 32});
    torch::AutoGradMode on(true);
    for (int i = 0; i < 2; ++i) model->forward(torch::randn({4, 3, 32, 32}));
    model->eval();
    torch::NoGradGuard off;
    io::save_safetensors((dir / "resnet18.safetensors").string(), io::named_state(*model), {{"arch", "resnet"}});
    io::save_safetensors((dir / "resnet18_io.safetensors").string(), {{"input", x}, {"logits", model->forward(x)}});
  }
  // a ConvNet moved off its init (two training-mode forwards move the BatchNorm statistics, noise the
  // weights), then its weights and its eval-mode logits on a random batch of (C, H, W) images
  auto export_moved = [&](const std::string& name, models::Model& model, std::vector<int64_t> chw) {
    {
      torch::AutoGradMode on(true);
      chw.insert(chw.begin(), 4);
      for (int i = 0; i < 2; ++i) model.forward(torch::randn(chw));
    }
    for (auto& p : model.parameters()) p.add_(0.05 * torch::randn(p.sizes()));
    model.eval();
    chw[0] = 3;
    auto x = torch::randn(chw);
    io::save_safetensors((dir / (name + ".safetensors")).string(), io::named_state(model), {{"arch", "convnet"}});
    io::save_safetensors((dir / (name + "_io.safetensors")).string(), {{"input", x}, {"logits", model.forward(x)}});
  };
  {
    // the quickstart's ConvNet: its init for seed 123 (PyTorch draws the same), then off the init with
    // BatchNorm statistics that moved
    auto model = test::make_model(test::convnet_cfg(), 123);
    io::save_safetensors((dir / "convnet_init.safetensors").string(), io::named_state(*model));
    export_moved("convnet", *model, {1, 28, 28});
  }
  {
    // model.whiten: an RGB ConvNet whose whitening filters come from these images (PyTorch recomputes
    // them through LAPACK), its init for seed 123 (no stem draws), then trained a little as above
    auto cfg = test::convnet_cfg(0.5, 3);
    cfg.whiten = 2;
    auto model = test::make_model(cfg, 123);
    const auto images = torch::randn({40, 3, 12, 12}) * torch::linspace(0.5, 2.0, 12).view({1, 1, 1, 12});
    model->init_from_data(images);
    io::save_safetensors((dir / "convnet_whiten_init.safetensors").string(), io::named_state(*model));
    io::save_safetensors((dir / "convnet_whiten_images.safetensors").string(), {{"images", images}});
    export_moved("convnet_whiten", *model, {3, 12, 12});
  }
  auto cfg = test::resnet_cfg(20, 10);
  export_model("resnet20_cifar", cfg, torch::randn({2, 3, 32, 32}));
  auto gpt = test::tiny_gpt_cfg();
  export_model("gpt", gpt, torch::randint(64, {2, 16}));
  gpt.bias = false;
  export_model("gpt_nobias", gpt, torch::randint(64, {2, 10}));
  CHECK(std::filesystem::exists(dir / "gpt_nobias_io.safetensors"));
}

TEST_CASE("interop export: vit safetensors with reference logits, vit_b_16's layout, the init of seed 123", "[unit][interop]") {
  auto dir = test::scratch_dir("models_interop_vit");
  torch::NoGradGuard no_grad;
  auto export_vit = [&](const std::string& name, config::ModelConfig cfg) {
    auto model = test::make_model(cfg, 123);
    io::save_safetensors((dir / (name + "_init.safetensors")).string(), io::named_state(*model));  // as initialised
    for (auto& p : model->parameters()) p.add_(0.05 * torch::randn(p.sizes()));  // off the init, zero head included
    model->eval();
    auto input = torch::randn({3, cfg.in_channels, cfg.image_size, cfg.image_size});
    io::save_safetensors((dir / (name + ".safetensors")).string(), io::named_state(*model), {{"arch", "vit"}});
    io::save_safetensors((dir / (name + "_io.safetensors")).string(), {{"input", input}, {"logits", model->forward(input)}});
  };
  export_vit("vit_rgb", test::tiny_vit_cfg());
  auto grey = test::tiny_vit_cfg();  // Fashion-MNIST's shape: 1 channel, 28x28, 7x7 patches
  grey.in_channels = 1;
  grey.image_size = 28;
  grey.patch_size = 7;
  export_vit("vit_grey", grey);
  // vit_b_16 (the defaults) is 330 MB of weights: its names and shapes only, one "name d0,d1,..." per line
  config::ModelConfig b16;
  b16.arch = "vit";
  b16.num_classes = 1000;  // ImageNet, as vit_b_16()
  std::string layout;
  for (const auto& [name, t] : io::named_state(*test::make_model(b16))) {
    layout += name + " ";
    for (int64_t i = 0; i < t.dim(); ++i) layout += fmt::format("{}{}", i ? "," : "", t.size(i));
    layout += "\n";
  }
  test::write_file(dir / "vit_b_16_layout.txt", layout);
  CHECK(std::filesystem::exists(dir / "vit_grey_io.safetensors"));
}
