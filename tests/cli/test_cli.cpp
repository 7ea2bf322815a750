// The trainer binary as a user meets it: exit codes, help, version, config errors, env, check.
#include <catch2/catch.hpp>

#include <filesystem>

#include "ckpt/ckpt_runs.hpp"
#include "config/load.hpp"
#include "test_util.hpp"

using trainer::test::run_trainer;
namespace fs = std::filesystem;

TEST_CASE("trainer --version prints the version and exits 0", "[e2e]") {
  auto r = run_trainer("--version");
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.output == std::string("trainer ") + TRAINER_VERSION + "\n");
}

TEST_CASE("trainer --help works on every subcommand", "[e2e]") {
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

TEST_CASE("check succeeds on every config in configs/", "[e2e]") {
  int n = 0;
  for (const auto& e : fs::directory_iterator(trainer::test::source_path("configs"))) {
    if (e.path().extension() != ".yaml") continue;
    auto loaded = trainer::config::load_config(e.path().string());
    const auto& d = loaded.cfg.data;
    // GPU-scale configs point at data this machine does not have: check validates them and builds the model
    bool have_data = d.format == trainer::config::DataFormat::Synthetic || fs::exists(d.path) ||
                     (d.path.find('*') != std::string::npos && fs::exists(fs::path(d.path).parent_path()));
    auto r = run_trainer("check " + e.path().string() + (have_data ? "" : " --no-data"));
    INFO(e.path().string() << "\n" << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find(": ok (hash ") != std::string::npos);
    CHECK(r.output.find(" parameters (") != std::string::npos);
    if (have_data) CHECK(r.output.find("steps per epoch: ") != std::string::npos);
    ++n;
  }
  REQUIRE(n >= 5);
}

TEST_CASE("check prints torchvision's parameter counts for resnet18 and resnet50", "[e2e]") {
  auto cfg = trainer::test::source_path("configs/tiny_synthetic.yaml");
  auto r18 = run_trainer("check " + cfg + " --no-data --set model.depth=18 --set model.width=1 --set model.in_channels=3 --set model.num_classes=1000");
  REQUIRE(r18.exit_code == 0);
  CHECK(r18.output.find("model: resnet, 11689512 parameters") != std::string::npos);
  auto r50 = run_trainer("check " + cfg + " --no-data --set model.depth=50 --set model.width=1 --set model.in_channels=3 --set model.num_classes=1000");
  REQUIRE(r50.exit_code == 0);
  CHECK(r50.output.find("model: resnet, 25557032 parameters") != std::string::npos);
}

TEST_CASE("check prints the GPT-2 124M parameter count", "[e2e]") {
  auto r = run_trainer("check " + trainer::test::source_path("configs/gpt2_124m.yaml") + " --no-data");
  REQUIRE(r.exit_code == 0);
  // vocab 50304, block 1024, 12 x 768, no biases, lm_head tied: V*C + T*C + L*(12*C*C + 2*C) + C
  // = 124,373,760 (nanoGPT prints 123.59M because it leaves out the position embeddings)
  CHECK(r.output.find("model: gpt, 124373760 parameters") != std::string::npos);
}

TEST_CASE("a key set twice on the command line is said, and --out-dir beside --set run.out_dir exits 2 before "
          "anything starts",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_set_twice");
  trainer::test::write_file(dir / "c.yaml", trainer::test::tiny_config("twice", 2));
  const std::string cfg = (dir / "c.yaml").string();
  auto r = trainer::test::run_trainer("check " + cfg + " --set optim.lr=0.1 --set optim.lr=0.2");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("--set optim.lr=0.2: optim.lr: is set twice on the command line (first by "
                                       "--set optim.lr=0.1): the later value is used"));
  r = trainer::test::run_trainer("run " + cfg + " --set run.out_dir=" + (dir / "a").string() + " --out-dir " +
                                 (dir / "b").string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--out-dir " + (dir / "b").string() + ": run.out_dir: --set run.out_dir=" +
                                       (dir / "a").string() + " names the run's folder too: give one of the two"));
  CHECK(!fs::exists(dir / "a"));
  CHECK(!fs::exists(dir / "b"));
}

TEST_CASE("trainer run logs an ETA line 20 steps after its first record, once, and none when the run ends first",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("eta_line");
  trainer::test::write_file(dir / "c.yaml", trainer::test::tiny_config("eta", 40));
  auto r = trainer::test::run_trainer("run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // the first record is step 1; the ETA is measured from it to step 21 (log_every 1)
  const auto at = r.output.find("ETA: 19 of 40 steps left at ");
  REQUIRE(at != std::string::npos);
  CHECK(r.output.find("(measured over steps 1-21)", at) != std::string::npos);
  CHECK(r.output.find("ETA: ", at + 1) == std::string::npos);  // once
  CHECK(r.output.find("step 21/40") < at);                      // after step 21's line

  auto short_run = trainer::test::run_trainer("run " + (dir / "c.yaml").string() + " --set train.max_steps=15 --set run.name=short "
                                              "--out-dir " + (dir / "runs").string());
  INFO(short_run.output);
  REQUIRE(short_run.exit_code == 0);
  CHECK(short_run.output.find("ETA: ") == std::string::npos);
}

TEST_CASE("a run directory is enough for export, --force without --resume never is refused, launch without -- says "
          "where the command goes",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_run_dir_uses");
  trainer::test::write_file(dir / "c.yaml", trainer::test::tiny_config("c", 2, ""));
  const std::string cfg = (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string();
  REQUIRE(run_trainer("run " + cfg).exit_code == 0);
  // export RUN_DIR: its newest checkpoint, as eval and predict take one (it said "no complete checkpoint")
  auto ex = run_trainer("export " + (dir / "runs/c").string() + " --out " + (dir / "c.safetensors").string());
  INFO(ex.output);
  CHECK(ex.exit_code == 0);
  CHECK(ex.output.find((dir / "runs/c/checkpoints/step-2").string()) != std::string::npos);
  CHECK(fs::exists(dir / "c.safetensors"));
  // --force did nothing without --resume never, in silence
  auto force = run_trainer("run " + cfg + " --force");
  CHECK(force.exit_code == 2);
  CHECK(force.output.find("--force goes with --resume never") != std::string::npos);
  auto launch = run_trainer("launch -n 2 run " + cfg);
  CHECK(launch.exit_code == 2);
  CHECK(launch.output.find("launch: put the ranks' command after --") != std::string::npos);
}
