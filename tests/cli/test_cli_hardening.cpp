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

// A model too large to allocate: LibTorch's message, not its 25-frame C++ backtrace.
TEST_CASE("a model that cannot be allocated is one error line, not a LibTorch stack trace", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_huge_model");
  trainer::test::write_file(dir / "g.yaml", "model: {arch: gpt, vocab_size: 256, block_size: 8, n_layer: 1, n_head: 1, "
                                            "n_embd: 1000000}\ndata: {format: synthetic}\n"
                                            "train: {batch_size: 2, max_steps: 1}\n");
  for (const char* cmd : {"check ", "run "}) {
    auto r = run_trainer(cmd + (dir / "g.yaml").string() + " --out-dir " + (dir / "out").string());
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("DefaultCPUAllocator: can't allocate memory: you tried to allocate") != std::string::npos);
    CHECK(r.output.find("frame #") == std::string::npos);
  }
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

// The files a config names are looked for before the run directory is made: a missing one had been a
// runtime failure (exit 1) after it, leaving an empty run folder behind.
TEST_CASE("a data file or model.init file that is not there is a config error at its key, before anything exists",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_missing_files");
  auto cfg = hardening_config(dir).string();
  trainer::test::write_file(dir / "text.yaml", "run: {name: t, out_dir: out}\ndata: {format: text, path: t.txt}\n"
                                               "model: {arch: gpt, vocab_size: 256, block_size: 8, n_layer: 1, "
                                               "n_head: 1, n_embd: 8}\ntrain: {batch_size: 8, max_steps: 1}\n");
  const std::string text = (dir / "text.yaml").string();
  trainer::test::write_file(dir / "t.txt", std::string(4000, 'a'));
  const std::string missing = (dir / "gone.txt").string(), pattern = (dir / "val_*.bin").string();
  // links that exist as names and lead nowhere: they passed the check (it took them for a pattern's match)
  const std::string dangling = (dir / "dangling").string(), loop = (dir / "loop_a").string();
  fs::create_symlink(dir / "no_target", dangling);
  fs::create_symlink(dir / "loop_b", loop);
  fs::create_symlink(loop, dir / "loop_b");
  struct Case {
    std::string args, error;
  };
  const std::vector<Case> cases = {
      {text + " --set data.path=" + missing,
       "--set data.path=" + missing + ": data.path: " + missing + ": no such file or folder, and no file matches it as a pattern"},
      {text + " --set data.val_path=" + pattern,
       ": data.val_path: " + pattern + ": no such file or folder"},
      {cfg + " --set model.init.from=" + missing, "--set model.init.from=" + missing + ": model.init.from: " + missing + ": no such file"},
      {text + " --set data.path=" + dangling, ": data.path: " + dangling + ": a symbolic link to nothing"},
      {text + " --set data.val_path=" + loop, ": data.val_path: " + loop + ": a loop of symbolic links"},
      {cfg + " --set model.init.from=" + dangling, ": model.init.from: " + dangling + ": a symbolic link to nothing"},
      // a run directory that cannot be resolved blamed checkpoint.dir ("is the run directory itself")
      {cfg + " --set run.out_dir=" + (dir / std::string(300, 'b')).string(),
       ": run.out_dir: the run directory " + (dir / std::string(300, 'b') / "h").string() +
           " (run.out_dir / run.name) cannot be made: File name too long"},
      // there, but of the wrong kind: they failed after the run directory was made (exit 1)
      {text + " --set data.path=" + dir.string(), ": data.path: " + dir.string() + ": is a folder; name the file"},
      {text + " --set data.path=/dev/zero", ": data.path: /dev/zero: is a character device, not a regular file or folder"},
      {cfg + " --set model.init.from=" + dir.string(), ": model.init.from: " + dir.string() + ": is a folder; name the file"},
      {cfg + " --set model.init.from=/dev/zero", ": model.init.from: /dev/zero: is a character device, not a regular file or folder"},
      {cfg + " --set checkpoint.dir=" + (dir / "t.txt").string(), ": checkpoint.dir: " + (dir / "t.txt").string() +
                                                                     ": is a file, not a folder for checkpoints"},
      // the run directory under a file: run failed with exit 1 after its checks, check passed
      {cfg + " --set run.out_dir=" + (dir / "t.txt" / "sub").string(),
       ": run.out_dir: " + (dir / "t.txt").string() + ": is a file, not a folder (the run directory is "},
      {cfg + " --set optim.lr=1e-400", ": optim.lr: expected a number a double holds (it is below 1e-308, so it reads as 0)"},
      // a range's bound and a value are shown as they are (both printed "1" at 6 digits)
      {cfg + " --set train.ema.decay=1", ": train.ema.decay: value 1 is out of range [0, 0.999999999]"},
      {cfg + " --set train.max_steps=010", ": train.max_steps: expected an integer without a leading 0 (YAML 1.1 "
                                           "reads 010 as octal 8, YAML 1.2 as 10: write 10 or 8), got '010'"},
      {cfg + " --set train.ema.decay=1.0000001", ": train.ema.decay: value 1.0000001 is out of range [0, 0.999999999]"}};
  for (const auto& c : cases)
    for (const char* cmd : {"check ", "run "}) {
      auto r = run_trainer(cmd + c.args);
      INFO(cmd << c.args << "\n" << r.output);
      CHECK(r.exit_code == 2);
      CHECK(r.output.find(c.error) != std::string::npos);
      CHECK(r.output.find("1 config error; nothing was started") != std::string::npos);
    }
  CHECK_FALSE(fs::exists(dir / "out"));
  // a file written in the config is named at its line and column
  trainer::test::write_file(dir / "files.yaml", "base: text.yaml\ndata:\n  path: nowhere.txt\n");
  auto at = run_trainer("run " + (dir / "files.yaml").string());
  INFO(at.output);
  CHECK(at.exit_code == 2);
  CHECK(at.output.find((dir / "files.yaml").string() + ":3:3: data.path: " + (dir / "nowhere.txt").string() +
                       ": no such file or folder") != std::string::npos);
  // --resume naming a file
  auto resume_file = run_trainer("run " + cfg + " --resume " + (dir / "t.txt").string());
  CHECK(resume_file.exit_code == 2);
  CHECK(resume_file.output.find("--resume " + (dir / "t.txt").string() + ": is a file, not a checkpoint folder") !=
        std::string::npos);
  fs::create_symlink(dir / "loop", dir / "loop");
  auto resume_loop = run_trainer("run " + cfg + " --resume " + (dir / "loop").string());
  CHECK(resume_loop.exit_code == 2);
  CHECK(resume_loop.output.find("--resume " + (dir / "loop").string() + ": a loop of symbolic links (") != std::string::npos);
  auto resume_dev = run_trainer("run " + cfg + " --resume /dev/null");
  CHECK(resume_dev.exit_code == 2);
  CHECK(resume_dev.output.find("--resume /dev/null: is a character device, not a checkpoint folder") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "out"));
  // data not on this machine: check --no-data does not look for it
  auto no_data = run_trainer("check --no-data " + text + " --set data.path=" + missing);
  INFO(no_data.output);
  CHECK(no_data.exit_code == 0);
  CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE("model.init is looked for by a fresh start only: a run that resumes has its weights in the checkpoint",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_init_resume");
  auto cfg = hardening_config(dir).string();
  REQUIRE(run_trainer("run " + cfg).exit_code == 0);
  const auto init = (dir / "init.safetensors").string();
  auto exported = run_trainer("export " + (dir / "out/h/checkpoints/latest").string() + " --out " + init);
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  const std::string b = cfg + " --set run.name=b --set model.init.from=" + init;
  auto first = run_trainer("run " + b);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  fs::remove(init);
  auto resumed = run_trainer("run " + b + " --set train.max_steps=2");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(resumed.output.find("resum") != std::string::npos);
  auto fresh = run_trainer("run " + b + " --set train.max_steps=2 --resume never --force");
  CHECK(fresh.exit_code == 2);
  CHECK(fresh.output.find("model.init.from: " + init + ": no such file") != std::string::npos);
}

// Every rank of a torchrun / mpirun / srun job reads the same config: each node's first rank prints
// the errors, the others one line (8 ranks had printed every error 8 times).
TEST_CASE("under a launcher, config errors are printed by local rank 0, the other ranks say one line", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_rank_errors");
  auto cfg = hardening_config(dir, "optim:\n  lr: .nan\n").string();
  const std::string job = "env WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 ";
  auto first = run_trainer("run " + cfg, job + "RANK=0 LOCAL_RANK=0");
  INFO(first.output);
  CHECK(first.exit_code == 2);
  CHECK(first.output.find(cfg + ":19:7: optim.lr: expected a finite number, got '.nan'") != std::string::npos);
  auto other = run_trainer("run " + cfg, job + "RANK=1 LOCAL_RANK=1");
  CHECK(other.exit_code == 2);
  CHECK(other.output == "error: 1 config error, printed by this node's local rank 0; nothing was started\n");
  auto mpi = run_trainer("check " + cfg, "env OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 "
                                         "OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2 "
                                         "MASTER_ADDR=127.0.0.1 MASTER_PORT=29999");
  CHECK(mpi.exit_code == 2);
  CHECK(mpi.output == "error: 1 config error, printed by this node's local rank 0; nothing was started\n");
  CHECK_FALSE(fs::exists(dir / "out"));
}
