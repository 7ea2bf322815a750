// Writes C++ models as safetensors plus their logits on a fixed input, for
// tests/python/test_models_interop.py, which loads them into torchvision / the nanoGPT reference with
// load_state_dict(strict=True) and compares the logits. Run by that script; harmless on its own.
#include <catch2/catch.hpp>

#include "model_test_util.hpp"
#include "test_util.hpp"

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
  auto cfg = test::resnet_cfg(20, 10);
  export_model("resnet20_cifar", cfg, torch::randn({2, 3, 32, 32}));
  auto gpt = test::tiny_gpt_cfg();
  export_model("gpt", gpt, torch::randint(64, {2, 16}));
  gpt.bias = false;
  export_model("gpt_nobias", gpt, torch::randint(64, {2, 10}));
  CHECK(std::filesystem::exists(dir / "gpt_nobias_io.safetensors"));
}
