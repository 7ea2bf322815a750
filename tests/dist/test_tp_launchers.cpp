// The 2-D mesh under every launcher (issue 24): torchrun and mpirun start dp 2 x tp 2 as `trainer
// launch -n 4` does, with the same losses bit for bit (the same ranks run the same arithmetic);
// `trainer launch --max-restarts` starts a tensor-parallel group with a killed rank again and the run
// ends with the uninterrupted run's losses; a rank 0 killed while it writes a tensor-parallel
// checkpoint leaves that checkpoint incomplete, never taken for a whole one, and the run resumes
// from the one before.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdlib>

#include "ckpt/ckpt_runs.hpp"
#include "ckpt/hardening_util.hpp"
#include "dist/launcher.hpp"
#include "launchers.hpp"
#include "skip.hpp"
#include "spawn.hpp"
#include "tp2d_runs.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace tp_launchers {  // named: the unity build joins the dist tests

namespace fs = std::filesystem;
using namespace test::tp2d;

// The same losses, bit for bit: the launcher only decides who starts the ranks.
void check_identical(const test::TrainRun& run, const test::TrainRun& ref, const char* what) {
  INFO(what << "\n" << run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.losses.size() == ref.losses.size());
  CHECK(run.world_size == 4);
  CHECK(run.output.find("tensor parallel 2 (data parallel 2") != std::string::npos);
  WARN(what << ": largest |loss difference| to trainer launch -n 4: " << test::max_abs_diff(run.losses, ref.losses));
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(run.losses[i] == ref.losses[i]);
  }
}

const std::string kMesh = kArgs + kTp2 + " --set train.batch_size=8";

TEST_CASE("torchrun and mpirun start dp 2 x tp 2 as trainer launch -n 4 does: the same losses, bit for bit",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_launchers");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto ref = test::train_tiny_gpt("", k2d + cfg + kMesh, dir / "launch");
  require_trained(ref, kSteps, 4);

  const std::string torchrun = test::venv_torchrun();
  const std::string mpirun = test::installed_mpirun();
  if (fs::exists(torchrun)) {
    // torchrun's agent hosts the store at the master port; the four ranks connect to it
    auto run = test::train_tiny_gpt(torchrun + " --no_python --nproc_per_node 4 --master_addr 127.0.0.1 --master_port " +
                                        std::to_string(dist::free_local_port()),
                                    "run " + cfg + kMesh, dir / "torchrun");
    check_identical(run, ref, "torchrun --nproc_per_node 4");
  }
  if (!mpirun.empty()) {
    // OpenMPI's ranks meet in a file (no MASTER_ADDR)
    auto run = test::train_tiny_gpt(mpirun + " --allow-run-as-root --oversubscribe -np 4 -x OMP_NUM_THREADS=1",
                                    "run " + cfg + kMesh + " --set dist.store=file://" + (dir / "rendezvous").string(),
                                    dir / "mpirun");
    check_identical(run, ref, "mpirun -np 4");
  }
  if (!fs::exists(torchrun)) TRAINER_SKIP("no torchrun at " << torchrun << " (set TRAINER_VENV)");
  if (mpirun.empty()) TRAINER_SKIP("mpirun is not installed");
}

// 40 steps with a checkpoint every 5: the kill lands after the first one, long before the end.
const std::string kLong = " --set train.max_steps=40 --set checkpoint.every_steps=5";

TEST_CASE("trainer launch --max-restarts starts a dp 2 x tp 2 group with a killed rank again, and the run ends with the "
          "uninterrupted run's losses",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_restart");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto ref = test::train_tiny_gpt("", k2d + cfg + kMesh + kLong, dir / "ref");
  require_trained(ref, 40, 4);

  const auto run_dir = dir / "runs" / "tiny";
  test::start_trainer("launch -n 4 --max-restarts 1 -- run " + cfg + kMesh + kLong + " --out-dir " +
                          (dir / "runs").string(),
                      dir / "a.log", dir / "a.rc");
  REQUIRE(test::wait_for([&] { return fs::exists(run_dir / "checkpoints/latest/manifest.json"); }, 240));
  // rank 3: tp rank 1 of dp rank 1, a rank that writes nothing
  const pid_t rank3 = test::lock_holder(run_dir / "logs/.rank3.lock");
  REQUIRE(rank3 > 0);
  REQUIRE(::kill(rank3, SIGKILL) == 0);
  const int rc = test::wait_rc(dir / "a.rc", 400);
  const auto log = test::read_file(dir / "a.log");
  INFO(log);
  REQUIRE(rc == 0);
  CHECK(log.find("launch: rank 3 exited with code 137; terminating the other ranks") != std::string::npos);
  CHECK(log.find("launch: restarting the group (restart 1 of 1) after exit code 137") != std::string::npos);
  const auto metrics = run_dir / "metrics.jsonl";
  CHECK(test::records(metrics, "attempt").size() == 2);
  // every step logged once over the two attempts, each the uninterrupted run's loss (the resumed steps
  // recompute from the checkpoint's global tensors, sliced again over the new group's tp ranks)
  const auto losses = test::train_losses(metrics);
  REQUIRE(losses.size() == 40);
  double worst = 0;
  for (const auto& [step, loss] : losses) {
    INFO("step " << step << ": " << loss << " vs " << ref.losses[step - 1]);
    const double rel = std::abs(loss - ref.losses[step - 1]) / std::abs(ref.losses[step - 1]);
    worst = std::max(worst, rel);
    CHECK(rel <= kRel);
  }
  WARN("--max-restarts at dp 2 x tp 2: largest relative loss difference to the uninterrupted run " << worst);
}

TEST_CASE("rank 0 killed while it writes a tp 2 checkpoint leaves it incomplete, and the run resumes from the one before",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_save_kill");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string tp2 = kArgs + kTp2 + " --set train.batch_size=16 --set checkpoint.every_steps=5";
  auto ref = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + tp2, dir / "ref");
  require_trained(ref, kSteps, 2);

  // SIGKILL after the step-10 checkpoint's tensors are written, before its manifest
  const auto killed = test::train_tiny_gpt("TRAINER_INJECT_KILL=0:save:10", "launch -n 2 -- run " + cfg + tp2, dir / "run");
  INFO(killed.output);
  REQUIRE(killed.exit_code != 0);
  REQUIRE(killed.output.find("TRAINER_INJECT_KILL: rank 0 SIGKILLs itself at the save of 10") != std::string::npos);
  const auto ckpts = dir / "run" / "tiny" / "checkpoints";
  CHECK_FALSE(fs::exists(ckpts / "step-10" / "manifest.json"));
  CHECK(fs::exists(ckpts / "step-5" / "manifest.json"));

  auto rest = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + tp2 + " --resume auto", dir / "run");
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  CHECK(rest.output.find("step-5") != std::string::npos);  // resumed from the last complete checkpoint
  const auto losses = test::train_losses(dir / "run" / "tiny" / "metrics.jsonl");
  REQUIRE(losses.size() == kSteps);
  for (const auto& [step, loss] : losses) {
    INFO("step " << step);
    CHECK(std::abs(loss - ref.losses[step - 1]) <= kRel * std::abs(ref.losses[step - 1]));
  }
}

}  // namespace tp_launchers
