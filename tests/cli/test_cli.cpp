// The trainer binary as a user meets it: exit codes, help, version, config errors, env, check.
#include <catch2/catch.hpp>

#include <filesystem>

#include "test_util.hpp"

using trainer::test::run_trainer;
namespace fs = std::filesystem;

TEST_CASE("--version prints the version and exits 0", "[e2e]") {
  auto r = run_trainer("--version");
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.output == std::string("trainer ") + TRAINER_VERSION + "\n");
}

TEST_CASE("--help works on every subcommand", "[e2e]") {
  for (const char* cmd : {"", "run ", "check ", "env ", "config-keys ", "launch ", "export ", "report ", "prepare-text "}) {
    INFO(cmd);
    auto r = run_trainer(std::string(cmd) + "--help");
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("Usage:") != std::string::npos);
  }
}

TEST_CASE("no subcommand or an unknown option is a usage error (exit 2)", "[e2e]") {
  CHECK(run_trainer("").exit_code == 2);
  CHECK(run_trainer("run --bogus x.yaml").exit_code == 2);
  auto r = run_trainer("run /nonexistent/exp.yaml");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("/nonexistent/exp.yaml") != std::string::npos);
}

TEST_CASE("a config typo prints file:line:col, the key and the suggestion, exits 2 and creates nothing", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_typo");
  trainer::test::write_file(dir / "exp.yaml",
                            "run:\n  name: typo\n  out_dir: runs\ndata:\n  format: synthetic\ntrain:\n  max_steps: 5\n"
                            "optim:\n  lr_rate: 0.1\n");
  auto r = run_trainer("run " + (dir / "exp.yaml").string());
  REQUIRE(r.exit_code == 2);
  REQUIRE(r.output.find((dir / "exp.yaml").string() + ":9:3: optim.lr_rate: unknown key, did you mean 'optim.lr'?") !=
          std::string::npos);
  REQUIRE(r.output.find("nothing was started") != std::string::npos);
  REQUIRE_FALSE(fs::exists(dir / "runs"));  // no run directory, no model, no data touched
}

TEST_CASE("check reports an override error with exit 2", "[e2e]") {
  auto r = run_trainer("check " + trainer::test::source_path("configs/tiny_synthetic.yaml") + " --set optim.lr=fast");
  REQUIRE(r.exit_code == 2);
  REQUIRE(r.output.find("--set optim.lr=fast: optim.lr: expected a number, got 'fast'") != std::string::npos);
}

TEST_CASE("env reports LibTorch, CUDA, threads, math libraries and the launcher", "[e2e]") {
  auto r = run_trainer("env");
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("LibTorch 2.") != std::string::npos);
  CHECK(r.output.find("CUDA available: ") != std::string::npos);
  CHECK(r.output.find("Intra-op threads: ") != std::string::npos);
  CHECK(r.output.find("CPU math: ") != std::string::npos);
  CHECK(r.output.find("Launcher: none (rank 0 of 1") != std::string::npos);
}

TEST_CASE("env names the launcher found in the environment and rejects a broken one", "[e2e]") {
  auto r = run_trainer("env", "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555");
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("Launcher: torchrun (rank 1 of 2, local rank 1 of 2), master 127.0.0.1:29555") != std::string::npos);
  auto bad = run_trainer("env", "RANK=3 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("torchrun launch: RANK=3 is not below WORLD_SIZE=2") != std::string::npos);
}

TEST_CASE("config-keys lists every section", "[e2e]") {
  auto r = run_trainer("config-keys");
  REQUIRE(r.exit_code == 0);
  for (const char* k : {"`run.seed`", "`model.arch`", "`data.format`", "`train.batch_size`", "`optim.lr`",
                        "`schedule.name`", "`dist.backend`", "`checkpoint.keep_last`", "`log.jsonl`"})
    CHECK(r.output.find(k) != std::string::npos);
}
