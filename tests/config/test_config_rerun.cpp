// A saved config runs again: the dump of every shipped config loads back with no error and the same
// hash; train.max_steps given over a config sized in epochs sizes the run (a longer warmup is said);
// the keys that change training, as a run directory's guard compares them; precision auto by default.
#include <catch2/catch.hpp>

#include <filesystem>

#include "config/config_diff.hpp"
#include "config/load.hpp"
#include "config/schema.hpp"
#include "test_util.hpp"

using namespace trainer::config;
namespace fs = std::filesystem;

namespace {
// The warnings' texts with the scratch folder taken out of the file names.
std::vector<std::string> rerun_warnings(const LoadedConfig& l, const fs::path& dir) {
  std::vector<std::string> out;
  const std::string prefix = dir.string() + "/";
  for (const auto& d : l.warnings) {
    std::string s = d.str();
    for (auto p = s.find(prefix); p != std::string::npos; p = s.find(prefix)) s.erase(p, prefix.size());
    out.push_back(s);
  }
  return out;
}
}  // namespace

TEST_CASE("train.precision defaults to auto and the dump says so", "[unit]") {
  RunConfig c;
  CHECK(c.train.precision == Precision::Auto);
  const std::string text = dump_yaml(c);
  CHECK(text.rfind(kDumpHeader, 0) == 0);
  CHECK(text.find("\n  precision: \"auto\"\n") != std::string::npos);
  CHECK(load_config_text("train: {precision: auto}\n", "a.yaml").cfg.train.precision == Precision::Auto);
}

TEST_CASE("the dump of every shipped config loads back with no error and the same hash", "[unit]") {
  auto dir = trainer::test::scratch_dir("config_rerun_shipped");
  int n = 0;
  for (const auto& e : fs::directory_iterator(trainer::test::source_path("configs"))) {
    if (e.path().extension() != ".yaml") continue;
    INFO(e.path().string());
    ValidateOptions opts;
    opts.cuda_available = true;  // the GPU configs too
    const auto first = load_and_validate(e.path().string(), {}, opts);
    const auto saved = dir / (e.path().stem().string() + "_config.yaml");  // as the run directory keeps it
    trainer::test::write_file(saved, dump_yaml(first.cfg));
    LoadedConfig again;
    try {
      again = load_and_validate(saved.string(), {}, opts);
    } catch (const ConfigError& err) {
      FAIL("the dump does not load back:\n" << err.what());
    }
    CHECK(again.cfg == first.cfg);
    CHECK(config_hash(again.cfg) == config_hash(first.cfg));
    CHECK(again.warnings.empty());
    ++n;
  }
  CHECK(n >= 5);
}

TEST_CASE("a dump still refuses a key edited to a value that does not apply to the run", "[unit]") {
  auto dir = trainer::test::scratch_dir("config_rerun_edit");
  const auto gpt = load_config_text("model: {arch: gpt}\ndata: {format: synthetic}\ntrain: {max_steps: 3}\n", "g.yaml");
  std::string text = dump_yaml(gpt.cfg);
  const auto at = text.find("\n  depth: 18\n");
  REQUIRE(at != std::string::npos);
  trainer::test::write_file(dir / "exp.yaml", text);
  CHECK_NOTHROW(load_and_validate((dir / "exp.yaml").string(), {}, {}));  // resnet's depth at its default: unset
  text.replace(at, 12, "\n  depth: 20\n");
  trainer::test::write_file(dir / "exp.yaml", text);
  try {
    load_and_validate((dir / "exp.yaml").string(), {}, {});
    FAIL("an edited depth on a gpt was accepted");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].message == "applies to model.arch 'resnet', but model.arch is 'gpt'");
  }
}

TEST_CASE("train.max_steps set by --set over a config sized in epochs sizes the run and clips the warmup", "[unit]") {
  auto dir = trainer::test::scratch_dir("config_rerun_steps");
  trainer::test::write_file(dir / "base.yaml", "schedule: {name: linear, warmup_steps: 300}\n");
  trainer::test::write_file(dir / "exp.yaml", "base: base.yaml\ndata:\n  format: synthetic\ntrain:\n  epochs: 8\n");
  const auto l = load_and_validate((dir / "exp.yaml").string(), {"train.max_steps=30"}, {});
  CHECK(l.cfg.train.max_steps == 30);
  CHECK(l.cfg.train.epochs == 0);
  CHECK(l.cfg.schedule.warmup_steps == 300);  // as written: the schedule ends it with the run
  CHECK(rerun_warnings(l, dir) == std::vector<std::string>{
                                 "--set train.max_steps=30: train.max_steps: sizes the run (30 steps): train.epochs 8 "
                                 "(exp.yaml:5:3) is replaced by 0",
                                 "base.yaml:1:26: schedule.warmup_steps: 300 is longer than the run (30 steps): "
                                 "the schedule clips it to 30"});
  // the other way round: --set train.epochs over a file's max_steps
  trainer::test::write_file(dir / "steps.yaml", "data:\n  format: synthetic\ntrain:\n  max_steps: 50\n");
  const auto e = load_and_validate((dir / "steps.yaml").string(), {"train.epochs=2"}, {});
  CHECK(e.cfg.train.max_steps == 0);
  CHECK(e.cfg.train.epochs == 2);
  REQUIRE(e.warnings.size() == 1);
  CHECK(e.warnings[0].message.find("sizes the run (2 epochs): train.max_steps 50") == 0);
  // a file over its base: the file's max_steps wins over the base's epochs
  trainer::test::write_file(dir / "ep.yaml", "data: {format: synthetic}\ntrain: {epochs: 3}\n");
  trainer::test::write_file(dir / "over.yaml", "base: ep.yaml\ntrain: {max_steps: 7}\n");
  const auto o = load_and_validate((dir / "over.yaml").string(), {}, {});
  CHECK(o.cfg.train.max_steps == 7);
  CHECK(o.cfg.train.epochs == 0);
  // the dump of the settled config loads back as it is
  trainer::test::write_file(dir / "config.yaml", dump_yaml(l.cfg));
  const auto again = load_and_validate((dir / "config.yaml").string(), {}, {});
  CHECK(config_hash(again.cfg) == config_hash(l.cfg));
  REQUIRE(again.warnings.size() == 1);  // the run's length is settled; the warmup is still longer than it
  CHECK(again.warnings[0].key == "schedule.warmup_steps");
}

TEST_CASE("a warmup longer than max_steps in one file is a warning, not refused", "[unit]") {
  auto dir = trainer::test::scratch_dir("config_rerun_warmup");
  trainer::test::write_file(dir / "exp.yaml",
                            "data:\n  format: synthetic\ntrain:\n  max_steps: 10\nschedule:\n  warmup_steps: 20\n");
  const auto l = load_and_validate((dir / "exp.yaml").string(), {}, {});
  CHECK(l.cfg.schedule.warmup_steps == 20);
  CHECK(rerun_warnings(l, dir) == std::vector<std::string>{"exp.yaml:6:3: schedule.warmup_steps: 20 is longer than "
                                                           "the run (10 steps): the schedule clips it to 10"});
}

TEST_CASE("training_changes lists the keys that change training, not where or how long it runs", "[unit]") {
  RunConfig a;
  a.train.batch_size = 64;
  resolve(a, 1);
  RunConfig b = a;
  b.optim.lr = 0.05;
  b.log.level = "warn";           // resumable: what it logs
  b.train.max_steps = 100;        // resumable: how long
  b.checkpoint.every_steps = 10;  // resumable: what it keeps
  b.train.threads = 2;
  const auto ch = training_changes(a, b);
  REQUIRE(ch.size() == 1);
  CHECK(ch[0].key == "optim.lr");
  CHECK(changes_text(ch) == "optim.lr 0.1 -> 0.05");
  RunConfig w = a;  // the same config on 2 ranks: a derived global batch doubles
  resolve(w, 2);
  REQUIRE(w.train.global_batch_size == 128);
  CHECK(training_changes(a, w).empty());
  RunConfig g = a;  // a global batch set and kept: grad_accum follows the world size
  g.train.global_batch_size = 128;
  resolve(g, 1);
  RunConfig g2 = g;
  resolve(g2, 2);
  REQUIRE(g2.train.grad_accum == 1);
  CHECK(training_changes(g, g2).empty());
  RunConfig acc = a;  // more accumulation on the same world: the global batch changes for real
  acc.train.grad_accum = 2;
  acc.train.global_batch_size = 0;
  resolve(acc, 1);
  CHECK(changes_text(training_changes(a, acc)) == "train.grad_accum 1 -> 2, train.global_batch_size 64 -> 128");
  RunConfig bs = a;
  bs.train.batch_size = 128;
  bs.train.global_batch_size = 0;
  resolve(bs, 1);
  CHECK(changes_text(training_changes(a, bs)) == "train.batch_size 64 -> 128, train.global_batch_size 64 -> 128");
}
