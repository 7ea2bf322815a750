// The model registry (model.init: test_init_load.cpp).
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
