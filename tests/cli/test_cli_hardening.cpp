// Issue 18 at the binary: configs and launches that must stop with exit 2 before anything exists.
#include <catch2/catch.hpp>

#include <filesystem>

#include "test_util.hpp"

using trainer::test::run_trainer;
namespace fs = std::filesystem;

namespace {

// A valid seconds-long config under `dir`, writing its runs to dir/out.
fs::path hardening_config(const fs::path& dir, const std::string& extra = "") {
  trainer::test::write_file(dir / "exp.yaml",
                            "run:\n  name: h\n  out_dir: out\nmodel:\n  depth: 8\n  width: 0.25\n  in_channels: 1\n"
                            "  num_classes: 2\ndata:\n  format: synthetic\n  synthetic:\n    num_samples: 16\n"
                            "    val_samples: 0\n    image_size: 8\ntrain:\n  batch_size: 8\n  max_steps: 1\n" +
                                extra);
  return dir / "exp.yaml";
}

}  // namespace

TEST_CASE("run names that leave run.out_dir are refused by check and run, and nothing is created", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_run_name");
  auto cfg = hardening_config(dir).string();
  for (const std::string name : {"..", "../escaped", "/tmp/abs", "''", "."}) {
    INFO(name);
    for (const char* cmd : {"check ", "run "}) {
      auto r = run_trainer(std::string(cmd) + cfg + " --set \"run.name=" + (name == "''" ? "" : name) + "\"");
      INFO(r.output);
      CHECK(r.exit_code == 2);
      CHECK(r.output.find("exp.yaml") == std::string::npos);  // an override: named by its --set text
      CHECK(r.output.find(": run.name: ") != std::string::npos);
      CHECK(r.output.find("nothing was started") != std::string::npos);
    }
  }
  CHECK_FALSE(fs::exists(dir / "out"));
  CHECK_FALSE(fs::exists(dir / "escaped"));
}

TEST_CASE("optim.lr .nan is a config error at its line, not a LibTorch stack trace", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_nan");
  auto cfg = hardening_config(dir, "optim:\n  lr: .nan\n").string();
  auto r = run_trainer("run " + cfg);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(cfg + ":19:7: optim.lr: expected a finite number, got '.nan'") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE("a config byte that is not UTF-8 stops the run before anything is created", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_utf8");
  auto cfg = hardening_config(dir).string();
  auto r = run_trainer("run " + cfg + " --set \"run.name=$(printf 'caf\\351')\"");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("run.name: not valid UTF-8 (byte 0xE9 at offset 3 of 'caf\\xE9')") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE("a multi-rank launch without a rendezvous address is a usage error that creates nothing", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_no_rendezvous");
  auto cfg = hardening_config(dir).string();
  for (const char* cmd : {"run ", "check "}) {
    auto r = run_trainer(std::string(cmd) + cfg, "env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("error: openmpi launch with 2 ranks: no rendezvous address; set MASTER_ADDR and "
                        "MASTER_PORT") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE("dist.recovery in_process under another launcher than trainer launch is a usage error that creates nothing",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_recovery_launcher");
  auto cfg = hardening_config(dir).string();
  for (const std::string env : {"env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999",
                                "env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999"}) {
    auto r = run_trainer("run " + cfg + " --set dist.recovery=in_process", env);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("dist.recovery: in_process needs `trainer launch` (this job was started by ") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir / "out"));
}
