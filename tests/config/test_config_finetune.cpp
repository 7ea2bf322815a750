// The fine-tuning keys: model.init.*, train.freeze, optim.groups (list and mapping values): loading,
// --set, dump round-trip and hash, and their errors with FILE:LINE:COL.
#include <catch2/catch.hpp>

#include "config/load.hpp"
#include "config/schema.hpp"
#include "test_util.hpp"

using namespace trainer::config;

namespace {

std::vector<std::string> finetune_errors(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto dir = trainer::test::scratch_dir("config_finetune");
  auto file = dir / "ft.yaml";
  trainer::test::write_file(file, yaml);
  std::vector<std::string> out;
  try {
    load_and_validate(file.string(), overrides, {});
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) {
      std::string s = d.str();
      auto p = s.find("ft.yaml");
      out.push_back(p == std::string::npos ? s : s.substr(p));
    }
  }
  return out;
}

const std::string kFtHead = "train:\n  max_steps: 10\ndata:\n  format: synthetic\n";

}  // namespace

TEST_CASE("fine-tuning keys load, dump and load back to the same config and hash", "[unit]") {
  const std::string yaml =
      "model:\n  init:\n    from: /w/r18.pth\n    strict: false\n    skip: ['^fc\\.', 'aux']\n"
      "    rename: {'module.': '', 'backbone.': 'features.'}\n    reinit_mismatched: true\n"
      "train:\n  freeze: ['^layer[12]\\.', '^conv1\\.']\n  freeze_bn: true\n"
      "optim:\n  groups:\n    - {match: '^fc\\.', lr: 0.5}\n    - {match: 'bn', weight_decay: 0.0}\n";
  auto a = load_config_text(yaml, "ft.yaml");
  const auto& c = a.cfg;
  CHECK(c.model.init.from == "/w/r18.pth");
  CHECK_FALSE(c.model.init.strict);
  CHECK(c.model.init.skip == std::vector<std::string>{"^fc\\.", "aux"});
  CHECK(c.model.init.rename == PrefixPairs{{"module.", ""}, {"backbone.", "features."}});  // file order
  CHECK(c.train.freeze == std::vector<std::string>{"^layer[12]\\.", "^conv1\\."});
  REQUIRE(c.optim.groups.size() == 2);
  CHECK((c.optim.groups[0] == ParamGroupRule{"^fc\\.", 0.5, std::nullopt}));
  CHECK((c.optim.groups[1] == ParamGroupRule{"bn", std::nullopt, 0.0}));
  const std::string dumped = dump_yaml(c);
  CHECK(dumped.find("  groups: [{match: \"^fc\\\\.\", lr: 0.5}, {match: \"bn\", weight_decay: 0.0}]\n") !=
        std::string::npos);
  auto b = load_config_text(dumped, "dumped.yaml");
  CHECK(b.cfg == c);
  CHECK(config_hash(b.cfg) == config_hash(c));
  RunConfig other = c;
  other.optim.groups[0].lr = 0.25;
  CHECK(config_hash(other) != config_hash(c));
}

TEST_CASE("fine-tuning keys through --set", "[unit]") {
  auto a = load_config_text("", "ft.yaml",
                            {"optim.groups=[{match: head, lr: 0.01}]", "train.freeze=['^stem']",
                             "model.init.rename={module.: ''}"});
  CHECK((a.cfg.optim.groups == std::vector<ParamGroupRule>{{"head", 0.01, std::nullopt}}));
  CHECK(a.cfg.train.freeze == std::vector<std::string>{"^stem"});
  CHECK(a.cfg.model.init.rename == PrefixPairs{{"module.", ""}});
  auto e = finetune_errors(kFtHead, {"train.freeze=['(']"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].rfind("--set train.freeze=['(']: train.freeze: '(' is not a valid regular expression (RE2 syntax; no backreferences or lookaround): ", 0) == 0);
}

TEST_CASE("fine-tuning key errors name file:line:col and the key", "[unit]") {
  auto e = finetune_errors(kFtHead + "optim:\n  groups:\n    - {match: 'fc[', lr: 0.1}\n    - {lr: 0.1, wd: 1}\n"
                                     "    - {match: x, lr: -1}\n");
  REQUIRE(e.size() == 4);
  CHECK(e[0].rfind("ft.yaml:7:15: optim.groups: 'fc[' is not a valid regular expression (RE2 syntax; no backreferences or lookaround): ", 0) == 0);
  CHECK(e[1] == "ft.yaml:8:17: optim.groups: unknown group key 'wd'; a group has match, lr, weight_decay");
  CHECK(e[2] == "ft.yaml:8:7: optim.groups: a group needs `match:` (a regex of parameter names)");
  CHECK(e[3] == "ft.yaml:9:22: optim.groups: lr: expected a number in [0, 1000], got '-1'");
  e = finetune_errors(kFtHead + "model:\n  init_from: a.safetensors\n  init: {from: b.pth}\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "ft.yaml:6:3: model.init_from: set together with model.init.from; model.init_from is the old name of "
                "model.init.from: keep one");
  e = finetune_errors(kFtHead + "model:\n  init: {skip: [fc]}\n  arch: gpt\n");
  CHECK(e == std::vector<std::string>{"ft.yaml:6:10: model.init.skip: has no effect without model.init.from (the file to load)"});
  e = finetune_errors(kFtHead + "model: {init: {from: x.pth, rename: {'': a}}}\n");
  CHECK(e == std::vector<std::string>{
                 "ft.yaml:5:38: model.init.rename: an empty prefix matches every name; give the prefix to replace"});
  e = finetune_errors("train:\n  max_steps: 10\n  freeze_bn: true\ndata:\n  format: synthetic\n");
  CHECK(e == std::vector<std::string>{"ft.yaml:3:3: train.freeze_bn: needs train.freeze (the parameters to freeze)"});
}
