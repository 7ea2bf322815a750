// Config composition (`base:`): deep merge in order, locations kept per file, chain errors.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "config/load.hpp"
#include "hostile_util.hpp"
#include "test_util.hpp"
#include <fmt/format.h>

using namespace trainer::config;
namespace fs = std::filesystem;

namespace {

const std::string kComposeHead = "train:\n  max_steps: 10\ndata:\n  format: synthetic\n";

// Writes `files` (name -> text) into a fresh scratch folder and returns it.
fs::path compose_files(const std::string& scratch, const std::vector<std::pair<std::string, std::string>>& files) {
  auto dir = trainer::test::scratch_dir(scratch);
  for (const auto& [name, text] : files) trainer::test::write_file(dir / name, text);
  return dir;
}

// The diagnostics of loading dir/exp.yaml, each with the scratch folder cut from every file name.
std::vector<std::string> compose_errors(const fs::path& dir, const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> out;
  try {
    load_and_validate((dir / "exp.yaml").string(), overrides, {});
  } catch (const ConfigError& e) {
    const std::string prefix = dir.string() + "/";
    for (const auto& d : e.diagnostics()) {
      std::string s = d.str();
      for (size_t p = s.find(prefix); p != std::string::npos; p = s.find(prefix)) s.erase(p, prefix.size());
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("base: maps merge deeply, the later file's scalars and lists win, --set wins over all", "[unit]") {
  auto dir = compose_files("compose_merge",
                           {{"common.yaml", kComposeHead + "  augment:\n    hflip: true\n    crop_padding: 2\n"
                                                           "  normalize:\n    mode: mean_std\n    mean: [0.1, 0.2, 0.3]\n"
                                                           "    std: [0.5, 0.5, 0.5]\n"
                                                           "optim:\n  lr: 0.5\n  momentum: 0.8\n"},
                            {"exp.yaml", "base: common.yaml\ndata:\n  augment:\n    crop_padding: 4\n"
                                         "  normalize:\n    mean: [0.4]\n    std: [0.25]\noptim:\n  lr: 0.25\n"}});
  auto l = load_and_validate((dir / "exp.yaml").string(), {"optim.momentum=0.7"}, {});
  CHECK(l.cfg.data.augment.hflip);               // from the base, untouched by the child's augment map
  CHECK(l.cfg.data.augment.crop_padding == 4);   // the child's
  CHECK(l.cfg.data.normalize.mean == std::vector<double>{0.4});  // a list is replaced, not merged
  CHECK(l.cfg.data.normalize.std == std::vector<double>{0.25});
  CHECK(l.cfg.data.normalize.mode == NormalizeMode::MeanStd);  // a scalar of the base's normalize map
  CHECK(l.cfg.optim.lr == 0.25);
  CHECK(l.cfg.optim.momentum == 0.7);  // --set last
  CHECK(l.cfg.train.max_steps == 10);
  CHECK(l.bases == std::vector<std::string>{(dir / "common.yaml").string()});
  // every value keeps the place it was written
  CHECK(l.where("data.augment.hflip").file == (dir / "common.yaml").string());
  CHECK(l.where("data.augment.hflip").line == 6);
  CHECK(l.where("data.augment.crop_padding").file == (dir / "exp.yaml").string());
  CHECK(l.where("data.augment.crop_padding").line == 4);
}

TEST_CASE("a base's key is removed with ~, null or nothing: the default, as if never set, also by --set", "[unit]") {
  auto dir = compose_files("compose_remove",
                           {{"common.yaml", "train:\n  max_steps: 10\n  label_smoothing: 0.1\n  epochs: 0\n"
                                            "data:\n  format: synthetic\n  augment:\n    hflip: true\n    crop_padding: 2\n"
                                            "  normalize:\n    mean: [0.1]\n    std: [0.5]\n"
                                            "run:\n  name: fromthebase\n  out_dir: elsewhere\n"
                                            "optim:\n  name: adamw\n  betas: [0.8, 0.9]\n"},
                            {"exp.yaml", "base: common.yaml\ntrain:\n  label_smoothing: ~\n  epochs: 2\n"
                                         "  max_steps: null\ndata:\n  augment:\n    hflip:\n"
                                         "  normalize:\n    mean: ~\n    std: ~\n"
                                         "optim:\n  betas: ~\n"}});
  auto l = load_and_validate((dir / "exp.yaml").string(),
                             {"data.augment.crop_padding=~", "optim.name=null", "run.name=~", "run.out_dir=null"}, {});
  const RunConfig defaults;
  CHECK(l.cfg.train.label_smoothing == 0.0);
  CHECK(l.cfg.train.max_steps == 0);
  CHECK_FALSE(l.is_set("train.max_steps"));  // removed: the run is sized by the child's epochs
  CHECK(l.cfg.train.epochs == 2);
  CHECK_FALSE(l.cfg.data.augment.hflip);
  CHECK(l.cfg.data.augment.crop_padding == 0);
  CHECK_FALSE(l.is_set("data.augment.crop_padding"));
  CHECK(l.cfg.data.normalize.mean == defaults.data.normalize.mean);
  CHECK(l.cfg.run.name == defaults.run.name);
  CHECK(l.cfg.optim.name == defaults.optim.name);
  CHECK(l.cfg.optim.betas == defaults.optim.betas);
  CHECK(l.cfg.run.out_dir != (dir / "elsewhere").string());
  CHECK_FALSE(l.is_set("run.name"));
  // in a file, nothing after a string key's colon stays the empty string (an empty run name is refused)
  trainer::test::write_file(dir / "empty.yaml", "base: common.yaml\nrun:\n  name:\n");
  CHECK_THROWS_AS(load_and_validate((dir / "empty.yaml").string(), {}, {}), ConfigError);
  // the saved config of that run loads again to the same config
  const auto again = load_config_text(dump_yaml(l.cfg), (dir / "saved.yaml").string());
  CHECK(config_hash(again.cfg) == config_hash(l.cfg));
}

TEST_CASE("a list of bases applies in order, each base after its own bases", "[unit]") {
  auto dir = compose_files("compose_order", {{"root.yaml", kComposeHead + "optim:\n  lr: 0.1\n  momentum: 0.1\n"
                                                                          "  weight_decay: 0.1\n"},
                                             {"a.yaml", "base: root.yaml\noptim:\n  lr: 0.2\n  momentum: 0.2\n"},
                                             {"b.yaml", "optim:\n  lr: 0.3\n"},
                                             {"exp.yaml", "base: [a.yaml, b.yaml]\n"}});
  auto l = load_and_validate((dir / "exp.yaml").string(), {}, {});
  CHECK(l.cfg.optim.lr == 0.3);            // b after a
  CHECK(l.cfg.optim.momentum == 0.2);      // a after root
  CHECK(l.cfg.optim.weight_decay == 0.1);  // root
  CHECK(l.bases == std::vector<std::string>{(dir / "root.yaml").string(), (dir / "a.yaml").string(),
                                            (dir / "b.yaml").string()});
}

TEST_CASE("a diamond of bases (two bases sharing one) is not a cycle", "[unit]") {
  auto dir = compose_files("compose_diamond", {{"d.yaml", kComposeHead},
                                               {"b.yaml", "base: d.yaml\noptim:\n  lr: 0.2\n"},
                                               {"c.yaml", "base: d.yaml\noptim:\n  momentum: 0.3\n"},
                                               {"exp.yaml", "base: [b.yaml, c.yaml]\n"}});
  auto l = load_and_validate((dir / "exp.yaml").string(), {}, {});
  CHECK(l.cfg.optim.lr == 0.2);
  CHECK(l.cfg.optim.momentum == 0.3);
}

TEST_CASE("a shared base is read and applied once, at its first place: a diamond ladder costs linear time", "[unit]") {
  // level i names two files that both name level i + 1: read naively, level 0 reads 2^15 files (the chain
  // exp -> l0 -> a0 -> l1 -> ... -> l15 stays within the depth limit of 32)
  constexpr int kLevels = 15;
  std::vector<std::pair<std::string, std::string>> files;
  for (int i = 0; i < kLevels; ++i) {
    const std::string next = fmt::format("l{}.yaml", i + 1);
    files.push_back({fmt::format("l{}.yaml", i), fmt::format("base: [a{0}.yaml, b{0}.yaml]\n", i)});
    files.push_back({fmt::format("a{}.yaml", i), fmt::format("base: {}\n", next)});
    files.push_back({fmt::format("b{}.yaml", i), fmt::format("base: {}\noptim:\n  lr: 0.{}\n", next, i + 1)});
  }
  files.push_back({"l" + std::to_string(kLevels) + ".yaml", kComposeHead + "optim:\n  lr: 0.9\n  momentum: 0.5\n"});
  files.push_back({"exp.yaml", "base: l0.yaml\n"});
  auto dir = compose_files("compose_ladder", files);
  auto l = load_and_validate((dir / "exp.yaml").string(), {}, {});
  CHECK(l.bases.size() == 3 * kLevels + 1);  // every file once
  CHECK(std::set<std::string>(l.bases.begin(), l.bases.end()).size() == l.bases.size());
  CHECK(l.cfg.optim.lr == 0.1);        // b0 is applied after everything below it
  CHECK(l.cfg.optim.momentum == 0.5);  // the bottom level
  // the shared base is not applied a second time after b.yaml overrode it
  auto dia = compose_files("compose_once", {{"d.yaml", kComposeHead + "optim:\n  lr: 0.1\n"},
                                            {"b.yaml", "base: d.yaml\noptim:\n  lr: 0.2\n"},
                                            {"c.yaml", "base: d.yaml\noptim:\n  momentum: 0.3\n"},
                                            {"exp.yaml", "base: [b.yaml, c.yaml]\n"}});
  auto once = load_and_validate((dia / "exp.yaml").string(), {}, {});
  CHECK(once.cfg.optim.lr == 0.2);
  CHECK(once.bases == std::vector<std::string>{(dia / "d.yaml").string(), (dia / "b.yaml").string(),
                                               (dia / "c.yaml").string()});
}

TEST_CASE("a base graph of more than 256 distinct files is refused, naming the chain", "[unit]") {
  std::vector<std::pair<std::string, std::string>> files;
  std::string list;
  for (int i = 0; i < 300; ++i) {
    files.push_back({fmt::format("w{}.yaml", i), "optim:\n  lr: 0.1\n"});
    list += fmt::format("{}w{}.yaml", i ? ", " : "", i);  // (literal + string trips GCC 12's -Wstringop-overflow)
  }
  files.push_back({"mid.yaml", kComposeHead + "base: [" + list + "]\n"});
  files.push_back({"exp.yaml", "base: mid.yaml\n"});
  auto dir = compose_files("compose_wide", files);
  auto e = compose_errors(dir);
  REQUIRE(e.size() == 1);
  CHECK(e[0].rfind("mid.yaml:5:", 0) == 0);
  CHECK(e[0].find("base: more than 256 distinct files in the base graph: exp.yaml -> mid.yaml -> w254.yaml") !=
        std::string::npos);
}

TEST_CASE("hostile YAML: 100,000 nested flow or block collections in a base are a syntax error, not a crash", "[unit]") {
  std::string dashes = "optim:\n  lr:\n";
  for (int i = 0; i < 100000; ++i) dashes += "- ";
  for (const auto& text : {"optim: {lr: " + std::string(100000, '[') + std::string(100000, ']') + "}\n", dashes + "1\n"}) {
    auto dir = compose_files("compose_deep_yaml", {{"deep.yaml", text}, {"exp.yaml", kComposeHead + "base: deep.yaml\n"}});
    std::vector<std::string> e;
    const auto err = trainer::test::error_within(60, [&] { e = compose_errors(dir); }, "deep YAML");
    CHECK(err.empty());
    REQUIRE(e.size() == 1);
    CHECK(e[0].rfind("deep.yaml:", 0) == 0);
    CHECK(e[0].find(": YAML syntax error: ") != std::string::npos);
    CHECK(e[0].find("(base chain: exp.yaml -> deep.yaml)") != std::string::npos);
  }
}

TEST_CASE("relative paths in a base resolve against the base's folder", "[unit]") {
  auto dir = compose_files("compose_paths", {{"shared/fmnist.yaml", "train:\n  max_steps: 10\ndata:\n  format: image_folder\n"
                                                                    "  path: images\nrun:\n  out_dir: ../runs\n"},
                                             {"exp.yaml", "base: shared/fmnist.yaml\n"}});
  auto l = load_and_validate((dir / "exp.yaml").string(), {}, {});
  CHECK(l.cfg.data.path == (dir / "shared/images").string());
  CHECK(l.cfg.run.out_dir == (dir / "runs").string());
}

TEST_CASE("an error in a base names the base file, line and column", "[unit]") {
  auto dir = compose_files("compose_base_error", {{"sub/b.yaml", kComposeHead + "optim:\n  lr: fast\n  lr_rate: 1\n"},
                                                  {"exp.yaml", "base: sub/b.yaml\nmodel:\n  depth: 8\n"}});
  CHECK(compose_errors(dir) == std::vector<std::string>{
                                   "sub/b.yaml:6:7: optim.lr: expected a number, got 'fast'",
                                   "sub/b.yaml:7:3: optim.lr_rate: unknown key, did you mean 'optim.lr'?",
                               });
  // a cross-field error points at the file that wrote the value the check refuses
  auto dir2 = compose_files("compose_base_validate", {{"b.yaml", kComposeHead + "model:\n  arch: gpt\n"},
                                                      {"exp.yaml", "base: b.yaml\nmodel:\n  depth: 8\n"}});
  auto e = compose_errors(dir2);
  REQUIRE(e.size() == 1);
  CHECK(e[0].rfind("exp.yaml:3:3: model.depth: ", 0) == 0);
}

TEST_CASE("a missing base names the file and the chain, at the base: entry", "[unit]") {
  auto dir = compose_files("compose_missing", {{"a.yaml", kComposeHead + "base: [nothere.yaml]\n"},
                                               {"exp.yaml", "base: a.yaml\n"}});
  CHECK(compose_errors(dir) ==
        std::vector<std::string>{"a.yaml:5:8: base: nothere.yaml: config file not found (base chain: exp.yaml -> "
                                 "a.yaml -> nothere.yaml)"});
}

TEST_CASE("a cycle of bases is refused, naming the chain", "[unit]") {
  auto dir = compose_files("compose_cycle", {{"a.yaml", kComposeHead + "base: b.yaml\n"},
                                             {"b.yaml", "base: a.yaml\n"},
                                             {"exp.yaml", "base: a.yaml\n"}});
  CHECK(compose_errors(dir) == std::vector<std::string>{"b.yaml:1:7: base: 'a.yaml' makes a cycle of bases: exp.yaml -> "
                                                        "a.yaml -> b.yaml -> a.yaml"});
  auto self = compose_files("compose_self", {{"exp.yaml", "base: ./exp.yaml\n" + kComposeHead}});
  CHECK(compose_errors(self) ==
        std::vector<std::string>{"exp.yaml:1:7: base: './exp.yaml' makes a cycle of bases: exp.yaml -> exp.yaml"});
}

TEST_CASE("a base that is not YAML, not a mapping or not a file name is an error naming the chain", "[unit]") {
  auto dir = compose_files("compose_bad_base", {{"list.yaml", "- 1\n- 2\n"},
                                                {"broken.yaml", "optim:\n  lr: [1, 2\n"},
                                                {"folder/keep", ""},
                                                {"exp.yaml", kComposeHead + "base: [list.yaml, broken.yaml, folder, [x]]\n"}});
  auto e = compose_errors(dir);
  REQUIRE(e.size() == 4);
  CHECK(e[0] == "list.yaml:1:1: the top level must be a mapping of sections (run:, model:, data:, ...) (base chain: "
                "exp.yaml -> list.yaml)");
  CHECK(e[1].rfind("broken.yaml:3:1: YAML syntax error: ", 0) == 0);
  CHECK(e[1].find("(base chain: exp.yaml -> broken.yaml)") != std::string::npos);
  CHECK(e[2] == "exp.yaml:5:32: base: folder: is a folder, expected a YAML file (base chain: exp.yaml -> folder)");
  CHECK(e[3] == "exp.yaml:5:40: base: expected a file name (relative to exp.yaml's folder)");
  auto map = compose_files("compose_base_map", {{"exp.yaml", kComposeHead + "base:\n  file: a.yaml\n"}});
  CHECK(compose_errors(map) ==
        std::vector<std::string>{"exp.yaml:6:3: base: expected a file name or a list of file names, got a mapping"});
}

TEST_CASE("a composed config dumps and hashes like the same config written flat", "[unit]") {
  auto dir = compose_files("compose_flat", {{"b.yaml", kComposeHead + "optim:\n  lr: 0.5\n  momentum: 0.8\n"},
                                            {"exp.yaml", "base: b.yaml\noptim:\n  lr: 0.25\n"},
                                            {"flat.yaml", kComposeHead + "optim:\n  lr: 0.25\n  momentum: 0.8\n"}});
  auto composed = load_and_validate((dir / "exp.yaml").string(), {}, {});
  auto flat = load_and_validate((dir / "flat.yaml").string(), {}, {});
  CHECK(dump_yaml(composed.cfg) == dump_yaml(flat.cfg));
  CHECK(config_hash(composed.cfg) == config_hash(flat.cfg));
  CHECK(dump_yaml(composed.cfg).find("base") == std::string::npos);  // the resolved config stands alone
}
