// Pipeline parallel under every launcher: torchrun and mpirun start pp 2 x dp 2 as `trainer launch
// -n 4` does, with the same losses bit for bit; `trainer launch --max-restarts` starts the group
// again after a stage's rank is killed with SIGKILL mid-run, and the run ends with the uninterrupted
// run's losses (the resumed steps recompute from the checkpoint's parts).
#include <catch2/catch.hpp>

#include <csignal>

#include "ckpt/ckpt_runs.hpp"
#include "ckpt/hardening_util.hpp"
#include "dist/launcher.hpp"
#include "launchers.hpp"
#include "skip.hpp"
#include "spawn.hpp"
#include "tp2d_runs.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace pp_launchers {  // named: the unity build joins the dist tests

namespace fs = std::filesystem;
using namespace test::tp2d;

const std::string kPp = kArgs + " --set dist.pipeline_parallel=2 --set train.batch_size=8";

void pp_check_identical(const test::TrainRun& run, const test::TrainRun& ref, const char* what) {
  INFO(what << "\n" << run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.losses.size() == ref.losses.size());
  CHECK(run.world_size == 4);
  CHECK(run.output.find("pipeline parallel 2 (data parallel 2: replicated (DDP) over dp groups of 2 ranks)") != std::string::npos);
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(run.losses[i] == ref.losses[i]);
  }
}

}  // namespace pp_launchers

using namespace pp_launchers;

TEST_CASE("torchrun and mpirun start pp 2 x dp 2 as trainer launch -n 4 does: the same losses, bit for bit",
          "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_launchers");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto ref = test::train_tiny_gpt("", k2d + cfg + kPp, dir / "launch");
  require_trained(ref, kSteps, 4);
  const std::string torchrun = test::venv_torchrun(), mpirun = test::installed_mpirun();
  if (fs::exists(torchrun)) {
    auto run = test::train_tiny_gpt(torchrun + " --no_python --nproc_per_node 4 --master_addr 127.0.0.1 --master_port " +
                                        std::to_string(dist::free_local_port()),
                                    "run " + cfg + kPp, dir / "torchrun");
    pp_check_identical(run, ref, "torchrun --nproc_per_node 4");
  }
  if (!mpirun.empty()) {
    auto run = test::train_tiny_gpt(mpirun + " --allow-run-as-root --oversubscribe -np 4 -x OMP_NUM_THREADS=1",
                                    "run " + cfg + kPp + " --set dist.store=file://" + (dir / "rendezvous").string(),
                                    dir / "mpirun");
    pp_check_identical(run, ref, "mpirun -np 4");
  }
  if (!fs::exists(torchrun)) TRAINER_SKIP("no torchrun at " << torchrun << " (set TRAINER_VENV)");
  if (mpirun.empty()) TRAINER_SKIP("mpirun is not installed");
}

TEST_CASE("trainer launch --max-restarts starts pp 2 x dp 2 again after a stage's rank is killed, and the run ends "
          "with the uninterrupted run's losses",
          "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_restart");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string longer = kPp + " --set train.max_steps=40 --set checkpoint.every_steps=5";
  auto ref = test::train_tiny_gpt("", k2d + cfg + longer, dir / "ref");
  require_trained(ref, 40, 4);

  const auto run_dir = dir / "runs" / "tiny";
  test::start_trainer("launch -n 4 --max-restarts 1 -- run " + cfg + longer + " --out-dir " + (dir / "runs").string(),
                      dir / "a.log", dir / "a.rc");
  REQUIRE(test::wait_for([&] { return fs::exists(run_dir / "checkpoints/latest/manifest.json"); }, 240));
  // rank 2: the second stage of dp rank 0, the writer of the checkpoints' part 1
  const pid_t rank2 = test::lock_holder(run_dir / "logs/.rank2.lock");
  REQUIRE(rank2 > 0);
  REQUIRE(::kill(rank2, SIGKILL) == 0);
  const int rc = test::wait_rc(dir / "a.rc", 400);
  const auto log = test::read_file(dir / "a.log");
  INFO(log);
  REQUIRE(rc == 0);
  CHECK(log.find("launch: rank 2 exited with code 137; terminating the other ranks") != std::string::npos);
  CHECK(log.find("launch: restarting the group (restart 1 of 1) after exit code 137") != std::string::npos);
  const auto losses = test::train_losses(run_dir / "metrics.jsonl");
  REQUIRE(losses.size() == 40);
  for (const auto& [step, loss] : losses) {
    INFO("step " << step << ": " << loss << " vs " << ref.losses[step - 1]);
    CHECK(std::abs(loss - ref.losses[step - 1]) <= kRel * std::abs(ref.losses[step - 1]));
  }
}
