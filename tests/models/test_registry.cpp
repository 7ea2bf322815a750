// The model registry and model.init_from.
#include <catch2/catch.hpp>

#include "config/load.hpp"
#include "config/schema.hpp"
#include "model_test_util.hpp"
#include "models/gpt.hpp"
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
  CHECK_THROWS_WITH(registry.add(models::gpt_spec()), "model arch 'gpt' is registered twice");
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

// Each family's ModelSpec is the one source of what config knows of it (config::ArchRules): the
// registered rules must be the spec's, with the input kind its model really takes, and its keys
// must be schema keys marked as family keys; every family key is some family's.
TEST_CASE("every ModelSpec's rules are what config knows of the family, and its keys are the schema's", "[unit]") {
  const auto& registry = models::builtin_models();
  CHECK(config::arch_names() == registry.names());
  config::RunConfig scratch;
  const auto fields = config::describe_fields(scratch);
  auto field = [&](const std::string& key) -> const config::FieldInfo* {
    for (const auto& f : fields)
      if (f.key == key) return &f;
    return nullptr;
  };
  for (auto cfg : {test::resnet_cfg(8), test::tiny_gpt_cfg(), test::tiny_vit_cfg()}) {
    INFO(cfg.arch);
    const auto& spec = registry.spec(cfg.arch);
    const auto* info = config::find_arch(cfg.arch);
    REQUIRE(info != nullptr);
    CHECK(info->keys == spec.rules.keys);
    CHECK(info->eval_metrics == spec.rules.eval_metrics);
    const bool image = test::make_model(cfg)->input_kind() == models::InputKind::Image;
    CHECK(image == (info->input == config::ArchInput::Image));
    for (const auto& key : spec.rules.keys) {
      INFO(key);
      const auto* f = field(key);
      REQUIRE(f != nullptr);
      CHECK(f->family_key);
      CHECK(config::applies_to_arch(*f, cfg.arch));
    }
  }
  for (const auto& f : fields)
    if (f.family_key) {
      INFO(f.key);
      CHECK_FALSE(f.applies_to.empty());
    }
  CHECK(config::find_arch("vit")->fixed_image_size);
  CHECK_FALSE(config::find_arch("resnet")->fixed_image_size);
  CHECK(config::find_arch("mlp") == nullptr);
  CHECK(registry.spec("gpt").measure_attention);
  CHECK_FALSE(registry.spec("vit").measure_attention);
}

// The units are what activation checkpointing wraps and what parameter sharding gathers one at a
// time: they must partition the parameters, and the checkpointed ones are the blocks.
TEST_CASE("a model's units partition its parameters and the checkpointed ones are its blocks", "[unit]") {
  auto cifar = test::resnet_cfg(8);
  auto imagenet = test::resnet_cfg(18);
  for (auto cfg : {cifar, imagenet, test::tiny_gpt_cfg(), test::tiny_vit_cfg()}) {
    INFO(cfg.arch << " " << cfg.depth);
    auto model = test::make_model(cfg);
    const auto units = model->units();
    std::vector<std::string> blocks;
    for (const auto& u : units)
      if (u.checkpointed) blocks.push_back(u.name);
    for (const auto& p : model->named_parameters(true)) {
      INFO(p.key());
      int owners = 0;
      for (const auto& u : units)
        for (const auto& prefix : u.prefixes)
          if (p.key() == prefix || (prefix.ends_with(".") && p.key().rfind(prefix, 0) == 0)) ++owners;
      CHECK(owners == 1);
    }
    if (cfg.arch == "gpt") CHECK(blocks.size() == static_cast<size_t>(cfg.n_layer));
    if (cfg.arch == "vit") CHECK(blocks.size() == static_cast<size_t>(cfg.num_layers));
    if (cfg.arch == "resnet") CHECK(blocks.size() == (cfg.depth == 18 ? 4u : 3u));  // stages
  }
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
