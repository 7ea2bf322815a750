// The model registry (model.init: test_init_load.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>

#include "config/load.hpp"
#include "config/schema.hpp"
#include "model_test_util.hpp"
#include "models/gpt.hpp"
#include "test_util.hpp"

using namespace trainer;

TEST_CASE("registry knows convnet, resnet, gpt and vit and lists them for an unknown arch", "[unit]") {
  models::ModelRegistry registry;
  models::register_builtin_models(registry);
  CHECK(registry.names() == std::vector<std::string>{"convnet", "gpt", "resnet", "vit"});
  config::ModelConfig cfg;
  cfg.arch = "mlp";
  CHECK_THROWS_AS(registry.create(cfg), std::invalid_argument);
  CHECK_THROWS_WITH(registry.create(cfg), "unknown model.arch 'mlp'; known: convnet, gpt, resnet, vit");
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
  CHECK(static_cast<bool>(registry.spec("gpt").attention_probe));
  CHECK_FALSE(static_cast<bool>(registry.spec("vit").attention_probe));
}

// The units are what activation checkpointing wraps and what parameter sharding gathers one at a
// time: they must partition the parameters, and the checkpointed ones are the blocks.
TEST_CASE("a model's units partition its parameters and the checkpointed ones are its blocks", "[unit]") {
  auto cifar = test::resnet_cfg(8);
  auto imagenet = test::resnet_cfg(18);
  for (auto cfg : {cifar, imagenet, test::tiny_gpt_cfg(), test::tiny_vit_cfg(), test::convnet_cfg()}) {
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
    if (cfg.arch == "convnet") CHECK(blocks.size() == 3u);
  }
}

namespace {

// What dist.sharding full does to a model, without ranks: the parameters of a unit hold their
// values only between the forward's enter_unit and leave_unit of that unit, NaN otherwise. A model
// whose forward reads a unit's weights outside that window gives non-finite logits.
class PoisoningGate final : public models::UnitGate {
 public:
  explicit PoisoningGate(models::Model& model) {
    const auto units = model.units();
    params_.resize(units.size());
    values_.resize(units.size());
    for (const auto& p : model.named_parameters(true)) {
      const auto u = static_cast<size_t>(models::unit_of(units, p.key()));  // every name has one (test above)
      params_.at(u).push_back(p.value());
      values_.at(u).push_back(p.value().detach().clone());
    }
    for (size_t u = 0; u < units.size(); ++u) poison(u);
  }
  void enter(size_t unit) override {
    torch::NoGradGuard ng;
    calls.push_back("enter " + std::to_string(unit));
    for (size_t k = 0; k < params_.at(unit).size(); ++k) params_[unit][k].copy_(values_[unit][k]);
  }
  torch::Tensor leave(size_t unit, torch::Tensor y) override {
    calls.push_back("leave " + std::to_string(unit));
    poison(unit);
    return y;
  }
  std::vector<std::string> calls;

 private:
  void poison(size_t unit) {
    torch::NoGradGuard ng;
    for (auto& p : params_[unit]) p.fill_(std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<std::vector<torch::Tensor>> params_, values_;
};

}  // namespace

TEST_CASE("every family gates its units: each unit's weights are read only between its enter and leave",
          "[unit]") {
  auto cifar = test::resnet_cfg(8);
  auto imagenet = test::resnet_cfg(18);
  auto vit_ac = test::tiny_vit_cfg();
  vit_ac.activation_checkpointing = true;
  auto convnet_ac = test::convnet_cfg();
  convnet_ac.activation_checkpointing = true;
  for (auto cfg : {cifar, imagenet, test::tiny_gpt_cfg(), test::tiny_vit_cfg(), vit_ac, test::convnet_cfg(), convnet_ac}) {
    INFO(cfg.arch << " " << cfg.depth);
    torch::manual_seed(1);
    auto model = test::make_model(cfg);
    CHECK(model->gates_units());
    model->eval();
    torch::NoGradGuard ng;
    const bool tokens = model->input_kind() == models::InputKind::Tokens;
    const auto x = tokens ? torch::randint(0, cfg.vocab_size, {2, 8})
                          : torch::randn({2, cfg.in_channels, cfg.arch == "vit" ? cfg.image_size : 32,
                                          cfg.arch == "vit" ? cfg.image_size : 32});
    const auto plain = model->forward(x);
    PoisoningGate gate(*model);
    model->set_unit_gate(&gate);
    const auto gated = model->forward(x);
    model->set_unit_gate(nullptr);
    CHECK(torch::equal(plain, gated));
    const size_t n = model->units().size();
    REQUIRE(gate.calls.size() == 2 * n);  // each unit entered and left once
    CHECK(gate.calls.front() == "enter 0");
    for (size_t u = 0; u < n; ++u) {
      const auto e = std::find(gate.calls.begin(), gate.calls.end(), "enter " + std::to_string(u));
      const auto l = std::find(gate.calls.begin(), gate.calls.end(), "leave " + std::to_string(u));
      CHECK(e < l);
    }
  }
}
