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
