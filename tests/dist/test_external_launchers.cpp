// torchrun (from the project's Python environment) and Debian's OpenMPI start the same 2-rank job
// as `trainer launch -n 2`: it trains, and logs exactly the same losses. Skipped with a warning
// where the launcher is not installed.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "dist/launcher.hpp"
#include "spawn.hpp"
#include "train_runs.hpp"
#include "skip.hpp"

using namespace trainer;

namespace {


std::string torchrun_path() { return test::venv_bin("torchrun"); }

std::string mpirun_path() {
  auto r = test::run_shell("command -v mpirun");
  if (r.exit_code != 0 || r.output.empty()) return "";
  return r.output.substr(0, r.output.find('\n'));
}

// The reference: `trainer launch -n 2` at batch 8 per rank.
test::TrainRun launch_reference(const std::filesystem::path& dir, const std::string& cfg) {
  return test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + " --set train.batch_size=8", dir / "launch");
}

void check_matches(const test::TrainRun& run, const test::TrainRun& ref) {
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.losses.size() == 20);
  CHECK(run.world_size == 2);
  CHECK(run.losses.back() < run.losses.front() - 0.1);  // it learns
  REQUIRE(ref.losses.size() == 20);
  WARN("max |loss difference| to trainer launch -n 2: " << test::max_abs_diff(run.losses, ref.losses) << " (run took "
                                                         << run.seconds << " s)");
  for (size_t i = 0; i < run.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(run.losses[i] == Approx(ref.losses[i]).margin(test::kLossTolerance).epsilon(0));
  }
}

}  // namespace

TEST_CASE("torchrun --no_python --nproc_per_node 2 trains like trainer launch -n 2", "[dist][e2e]") {
  if (test::is_worker()) return;
  const std::string torchrun = torchrun_path();
  if (!std::filesystem::exists(torchrun)) {
    TRAINER_SKIP("no torchrun at " << torchrun << " (set TRAINER_VENV)");
  }
  auto dir = test::scratch_dir("torchrun_e2e");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto ref = launch_reference(dir, cfg);
  // torchrun's agent hosts the store at the master port; the ranks connect to it as clients
  auto run = test::train_tiny_gpt(torchrun + " --no_python --nproc_per_node 2 --master_addr 127.0.0.1 --master_port " +
                                      std::to_string(dist::free_local_port()),
                                  "run " + cfg + " --set train.batch_size=8", dir / "torchrun");
  check_matches(run, ref);
}

TEST_CASE("mpirun -np 2 with a FileStore trains like trainer launch -n 2", "[dist][e2e]") {
  if (test::is_worker()) return;
  const std::string mpirun = mpirun_path();
  if (mpirun.empty()) {
    TRAINER_SKIP("mpirun is not installed");
  }
  auto dir = test::scratch_dir("mpirun_filestore_e2e");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto ref = launch_reference(dir, cfg);
  // no MASTER_ADDR: the ranks meet in a file
  auto run = test::train_tiny_gpt(mpirun + " --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1",
                                  "run " + cfg + " --set train.batch_size=8 --set dist.store=file://" +
                                      (dir / "rendezvous").string(),
                                  dir / "mpirun");
  check_matches(run, ref);
  CHECK_FALSE(std::filesystem::exists(dir / "rendezvous"));  // the last rank to leave removes it
}

TEST_CASE("mpirun -np 2 with MASTER_ADDR/MASTER_PORT trains like trainer launch -n 2", "[dist][e2e]") {
  if (test::is_worker()) return;
  const std::string mpirun = mpirun_path();
  if (mpirun.empty()) {
    TRAINER_SKIP("mpirun is not installed");
  }
  auto dir = test::scratch_dir("mpirun_tcp_e2e");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto ref = launch_reference(dir, cfg);
  auto run = test::train_tiny_gpt(mpirun + " --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "
                                           "-x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=" +
                                      std::to_string(dist::free_local_port()),
                                  "run " + cfg + " --set train.batch_size=8", dir / "mpirun");
  check_matches(run, ref);
}
