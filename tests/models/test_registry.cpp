// The model registry and model.init_from.
#include <catch2/catch.hpp>

#include "config/load.hpp"
#include "config/schema.hpp"
#include "model_test_util.hpp"
#include "test_util.hpp"

using namespace trainer;

TEST_CASE("registry knows resnet, gpt and vit and lists them for an unknown arch", "[unit]") {
  models::ModelRegistry registry;
  models::register_builtin_models(registry);
  CHECK(registry.names() == std::vector<std::string>{"gpt", "resnet", "vit"});
  config::ModelConfig cfg;
  cfg.arch = "mlp";
  CHECK_THROWS_AS(registry.create(cfg), std::invalid_argument);
  CHECK_THROWS_WITH(registry.create(cfg), "unknown model.arch 'mlp'; known: gpt, resnet, vit");
  CHECK_THROWS_WITH(registry.add("gpt", nullptr), "model arch 'gpt' is registered twice");
  auto gpt = test::make_model(test::tiny_gpt_cfg());
  CHECK(gpt->arch() == "gpt");
  CHECK(gpt->input_kind() == models::InputKind::Tokens);
  auto resnet = test::make_model(test::resnet_cfg(8));
  CHECK(resnet->arch() == "resnet");
  CHECK(resnet->input_kind() == models::InputKind::Image);
  auto vit = test::make_model(test::tiny_vit_cfg());
  CHECK(vit->arch() == "vit");
  CHECK(vit->input_kind() == models::InputKind::Image);
}

// config/schema.hpp's arch table stands in for the registry below the models layer (validation, data
// checks): it must list the registry's archs, with the input kind each model really takes.
TEST_CASE("the config schema's arch table agrees with the model registry", "[unit]") {
  models::ModelRegistry registry;
  models::register_builtin_models(registry);
  std::vector<std::string> table;
  for (const auto& a : config::arch_infos()) table.push_back(a.name);
  CHECK(table == registry.names());
  CHECK(config::ValidateOptions{}.known_archs == registry.names());
  for (auto cfg : {test::resnet_cfg(8), test::tiny_gpt_cfg(), test::tiny_vit_cfg()}) {
    INFO(cfg.arch);
    const auto* info = config::find_arch(cfg.arch);
    REQUIRE(info != nullptr);
    const bool image = test::make_model(cfg)->input_kind() == models::InputKind::Image;
    CHECK(image == (info->input == config::ArchInput::Image));
  }
  CHECK(config::find_arch("vit")->fixed_image_size);
  CHECK_FALSE(config::find_arch("resnet")->fixed_image_size);
  CHECK(config::find_arch("mlp") == nullptr);
}

TEST_CASE("init_from loads a saved model exactly (resnet, tied gpt, vit)", "[unit]") {
  auto dir = test::scratch_dir("models_init_from");
  for (auto cfg : {test::resnet_cfg(20), test::tiny_gpt_cfg(), test::tiny_vit_cfg()}) {
    INFO(cfg.arch);
    auto a = test::make_model(cfg, 1);
    const auto path = (dir / (cfg.arch + ".safetensors")).string();
    io::save_safetensors(path, io::named_state(*a));
    cfg.init_from = path;
    auto b = test::make_model(cfg, 2);  // a different seed: every value must come from the file
    auto sa = io::named_state(*a), sb = io::named_state(*b);
    REQUIRE(sa.size() == sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      INFO(sa[i].first);
      CHECK(sa[i].first == sb[i].first);
      CHECK(torch::equal(sa[i].second, sb[i].second));
    }
  }
}

TEST_CASE("init_from with a file of another model names the file and every mismatch", "[unit]") {
  auto dir = test::scratch_dir("models_init_from_mismatch");
  const auto path = (dir / "r8.safetensors").string();
  auto cfg = test::resnet_cfg(8, 4);
  io::save_safetensors(path, io::named_state(*test::make_model(cfg)));
  cfg.num_classes = 5;
  cfg.init_from = path;
  CHECK_THROWS_WITH(test::make_model(cfg), path + ": does not match the model; mis-shaped (2): fc.weight (file [4, 64], "
                                                  "model [5, 64]), fc.bias (file [4], model [5])");
  cfg.init_from = (dir / "missing.safetensors").string();
  CHECK_THROWS_WITH(test::make_model(cfg), cfg.init_from + ": cannot open: No such file or directory");
}
