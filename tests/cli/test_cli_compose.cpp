// The command line around the new commands and config composition: unknown commands, `base:` seen
// by check and run (the run directory's config.yaml is the merged one), chain errors with exit 2.
#include <catch2/catch.hpp>

#include <filesystem>

#include "config/load.hpp"
#include "test_util.hpp"

using trainer::test::run_trainer;
namespace fs = std::filesystem;

TEST_CASE("an unknown command is named, with the known ones, exit 2", "[e2e]") {
  auto r = run_trainer("predikt x.yaml");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("error: unknown command predikt; known: run, check, launch, sweep, prepare-text, export, report, eval, "
                      "predict, bench-data, env, config-keys") != std::string::npos);
  for (const char* cmd : {"eval --help", "predict --help"}) {
    INFO(cmd);
    auto h = run_trainer(cmd);
    CHECK(h.exit_code == 0);
    CHECK(h.output.find("--checkpoint") != std::string::npos);
  }
}

// Checked once by launch, before any rank starts (each rank said "unknown command" before); and
// numbers out of range named plainly (CLI11's own checks printed DBL_MAX's 309 digits).
TEST_CASE("launch without a command after --, and numbers out of range, are named plainly, exit 2", "[e2e]") {
  auto r = run_trainer("launch -n 2 -- exp.yaml");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("error: launch: the command each rank runs comes after --, e.g. trainer launch -n 4 -- run "
                      "exp.yaml; got exp.yaml, which is not a trainer command") != std::string::npos);
  CHECK(r.output.find("[rank") == std::string::npos);  // no rank started
  auto nested = run_trainer("launch -n 2 -- launch -n 2 -- run exp.yaml");
  CHECK(nested.exit_code == 2);
  CHECK(nested.output.find("got launch, which a rank cannot run (one launcher per node)") != std::string::npos);
  const auto text_file = trainer::test::scratch_dir("cli_numbers") / "in.txt";
  trainer::test::write_file(text_file, "hello\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"launch -n 0 -- run exp.yaml", "--nproc: must be > 0, got 0"},
      {"prepare-text " + text_file.string() + " --out o --shard-tokens -5", "--shard-tokens: must be > 0, got -5"},
      {"launch -n 2 --node-rank x -- run exp.yaml", "--node-rank: expected a number, got 'x'"},
      {"launch -n 2 --max-restarts -1 -- run exp.yaml", "--max-restarts: must be >= 0, got -1"}};
  for (const auto& [cmd, text] : cases) {
    INFO(cmd);
    auto c = run_trainer(cmd);
    INFO(c.output);
    CHECK(c.exit_code == 2);
    CHECK(c.output.find(text) != std::string::npos);
    CHECK(c.output.find("179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766") ==
          std::string::npos);
  }
}

namespace {

// A valid seconds-long config under `dir`, its runs in dir/runs.
fs::path small_config(const fs::path& dir) {
  trainer::test::write_file(dir / "exp.yaml",
                            "run: {name: s, out_dir: runs}\n"
                            "model: {arch: resnet, depth: 8, width: 0.25, in_channels: 1, num_classes: 2}\n"
                            "data: {format: synthetic, workers: 1, synthetic: {num_samples: 16, val_samples: 0, "
                            "image_size: 8}}\ntrain: {batch_size: 8, max_steps: 1, threads: 1}\nlog: {progress: off}\n");
  return dir / "exp.yaml";
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("launch -n above the usable cores says so once and starts the ranks all the same", "[e2e]") {
  const auto cfg = small_config(trainer::test::scratch_dir("launch_cores")).string();
  // taskset pins the launcher (and so its ranks) to one core, whatever the host has
  auto over = run_trainer("launch -n 2 -- run " + cfg, "taskset -c 0");
  INFO(over.output);
  CHECK(over.exit_code == 0);
  CHECK(count(over.output, "launch: note: 2 ranks on 1 usable core(s) share them (one intra-op thread each): fine to "
                           "check a layout, slow to train") == 1);
  CHECK(over.output.find("distributed: rank 0 of 2 (trainer launch") != std::string::npos);
  // no validation data: the done line says there was no evaluation (it had said "best accuracy 0.0000 at step 0")
  CHECK(over.output.find("(max_steps); no evaluation") != std::string::npos);
  auto fits = run_trainer("launch -n 1 -- run " + cfg + " --set run.name=one", "taskset -c 0");
  CHECK(fits.exit_code == 0);
  CHECK(fits.output.find("launch: note:") == std::string::npos);
}

// `run`'s and `check`'s checks before anything is created run once, in the launcher: each rank had
// printed the same errors, interleaved, and the launcher had terminated the others after the first.
TEST_CASE("launch -- run or check: a refused command is said once, by the launcher, and no rank starts", "[e2e]") {
  const auto dir = trainer::test::scratch_dir("launch_refused");
  const auto cfg = small_config(dir).string();
  struct Case {
    std::string args, error;
  };
  const std::vector<Case> cases = {
      {"run " + cfg + " --set model.depht=8", "--set model.depht=8: model.depht: unknown key, did you mean 'model.depth'?"},
      {"run " + cfg + " --set data.format=image_folder --set data.path=gone",
       "--set data.path=gone: data.path: " + (fs::current_path() / "gone").string() + ": no such file or folder"},
      {"run --bogus " + cfg, "The following argument was not expected: --bogus"},
      {"run " + (dir / "none.yaml").string(), "config: File does not exist: " + (dir / "none.yaml").string()},
      {"check " + cfg + " --set data.format=image_folder --set data.path=gone",
       "--set data.path=gone: data.path: " + (fs::current_path() / "gone").string() + ": no such file or folder"},
      {"check --memory-gb 0 " + cfg, "--memory-gb: must be > 0, got 0"}};
  for (const auto& c : cases) {
    auto r = run_trainer("launch -n 3 -- " + c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.exit_code == 2);
    CHECK(count(r.output, c.error) == 1);
    CHECK(r.output.find("[rank") == std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir / "runs"));
  // a refusal that needs a run directory: --resume never over its checkpoints
  REQUIRE(run_trainer("run " + cfg).exit_code == 0);
  auto again = run_trainer("launch -n 2 -- run " + cfg + " --resume never");
  INFO(again.output);
  CHECK(again.exit_code == 2);
  CHECK(count(again.output, "already holds checkpoints (step-1, ...); --resume never starts over only with --force") == 1);
  CHECK(again.output.find("[rank") == std::string::npos);
}

TEST_CASE("a composed config: check and run see the merged config, config.yaml holds it", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_compose");
  trainer::test::write_file(dir / "shared" / "base.yaml",
                            "run: {out_dir: ../runs}\n"
                            "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 1, num_classes: 4}\n"
                            "data: {format: synthetic, workers: 1, synthetic: {num_samples: 64, val_samples: 16, "
                            "image_size: 8}}\n"
                            "train: {batch_size: 16, max_steps: 2, threads: 1}\nlog: {progress: off}\n");
  trainer::test::write_file(dir / "exp.yaml", "base: shared/base.yaml\nrun: {name: composed}\noptim: {lr: 0.02}\n");
  auto merged = trainer::config::load_and_validate((dir / "exp.yaml").string(), {}, {});  // resolved, as check does
  auto check = run_trainer("check --no-data " + (dir / "exp.yaml").string());
  INFO(check.output);
  REQUIRE(check.exit_code == 0);
  CHECK(check.output.find("(hash " + trainer::config::config_hash(merged.cfg).substr(0, 12) + ")") != std::string::npos);
  CHECK(check.output.find("bases (applied in this order, then the file): " + (dir / "shared" / "base.yaml").string() +
                          "\n") != std::string::npos);
  auto run = run_trainer("run " + (dir / "exp.yaml").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const auto saved = trainer::config::load_config((dir / "runs" / "composed" / "config.yaml").string());
  CHECK(saved.cfg.optim.lr == 0.02);        // the file's
  CHECK(saved.cfg.train.max_steps == 2);    // the base's
  CHECK(saved.cfg.model.width == 0.5);
  CHECK(trainer::config::dump_yaml(saved.cfg) == trainer::config::dump_yaml(merged.cfg));
}

TEST_CASE("a missing base or a cycle of bases is a config error naming the chain, exit 2", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_compose_errors");
  trainer::test::write_file(dir / "a.yaml", "base: b.yaml\n");
  trainer::test::write_file(dir / "b.yaml", "base: a.yaml\n");
  trainer::test::write_file(dir / "c.yaml", "base: [a.yaml]\n");
  auto cycle = run_trainer("check " + (dir / "c.yaml").string());
  CHECK(cycle.exit_code == 2);
  CHECK(cycle.output.find((dir / "b.yaml").string() + ":1:7: base: 'a.yaml' makes a cycle of bases: " +
                          (dir / "c.yaml").string() + " -> " + (dir / "a.yaml").string() + " -> " +
                          (dir / "b.yaml").string() + " -> " + (dir / "a.yaml").string()) != std::string::npos);
  CHECK(cycle.output.find("nothing was started") != std::string::npos);
  trainer::test::write_file(dir / "d.yaml", "base: gone.yaml\n");
  auto missing = run_trainer("run " + (dir / "d.yaml").string());
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find((dir / "d.yaml").string() + ":1:7: base: " + (dir / "gone.yaml").string() +
                            ": config file not found") != std::string::npos);
}
