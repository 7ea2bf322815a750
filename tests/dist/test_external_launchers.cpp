// torchrun (from the project's Python environment) and Debian's OpenMPI start the same 2-rank job
// as `trainer launch -n 2`: it trains, and logs exactly the same losses. Skipped with a warning
// where the launcher is not installed.
#include <catch2/catch.hpp>

#include <signal.h>

#include <cstdlib>
#include <regex>

#include "ckpt/hardening_util.hpp"
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

// Rank 0 hangs (stopped, not dead) while it hosts the TCP store, as under mpirun or srun: rank 1's
// collective times out after dist.timeout_s and it ends with exit 1. It then read the store for a
// note rank 0 might have left, a read with no time-out, and waited forever.
TEST_CASE("a hung rank 0 hosting the store: rank 1 fails after dist.timeout_s instead of waiting forever",
          "[dist][e2e]") {
  auto dir = test::scratch_dir("hung_store_host");
  std::string yaml = test::kTinyGptYaml;
  yaml.replace(yaml.find("max_steps: 20"), 13, "max_steps: 100000");
  yaml.replace(yaml.find("timeout_s: 60"), 13, "timeout_s: 5");
  test::write_file(dir / "g.yaml", yaml);
  const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(dist::free_local_port()) +
                          " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 OMP_NUM_THREADS=1";
  const std::string run_args = "run " + (dir / "g.yaml").string() + " --out-dir " + (dir / "out").string();
  for (int r : {0, 1})
    test::start_trainer(run_args, dir / ("r" + std::to_string(r) + ".log"), dir / ("r" + std::to_string(r) + ".rc"),
                        env + " RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r));
  const auto run = dir / "out" / "tiny";
  pid_t rank0 = 0;
  REQUIRE(test::wait_for([&] {
    rank0 = test::lock_holder(run / ".lock");
    return rank0 > 0 && test::read_file(run / "metrics.jsonl").find("\"step\":3,") != std::string::npos;
  }));
  REQUIRE(::kill(rank0, SIGSTOP) == 0);
  const int code = test::wait_rc(dir / "r1.rc", 120);
  ::kill(rank0, SIGKILL);
  test::wait_rc(dir / "r0.rc", 60);
  const auto output = test::read_file(dir / "r1.log");
  INFO(output);
  CHECK(code == 1);
  CHECK(output.find("error: ") != std::string::npos);
}

// Processes started by hand as ranks of one job (tiny GPT, dist.timeout_s 600: a test that waited it
// out would fail), process i with `RANK=ranks[i] WORLD_SIZE=worlds[i]`, each in its own run directory;
// waits for every one and returns their outputs, checking that each exited 1.
std::vector<std::string> hand_started_ranks(const std::string& name, const std::vector<int>& ranks,
                                            const std::vector<int>& worlds) {
  auto dir = test::scratch_dir(name);
  std::string yaml = test::kTinyGptYaml;
  yaml.replace(yaml.find("timeout_s: 60"), 13, "timeout_s: 600");
  test::write_file(dir / "g.yaml", yaml);
  const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(dist::free_local_port()) +
                          " OMP_NUM_THREADS=1 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0";
  for (size_t i = 0; i < ranks.size(); ++i)
    test::start_trainer("run " + (dir / "g.yaml").string() + " --out-dir " + (dir / ("out" + std::to_string(i))).string(),
                        dir / ("p" + std::to_string(i) + ".log"), dir / ("p" + std::to_string(i) + ".rc"),
                        env + " RANK=" + std::to_string(ranks[i]) + " WORLD_SIZE=" + std::to_string(worlds[i]));
  std::vector<std::string> outputs;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int code = test::wait_rc(dir / ("p" + std::to_string(i) + ".rc"), 300);  // (600 s before)
    outputs.push_back(test::read_file(dir / ("p" + std::to_string(i) + ".log")));
    INFO("process " << i << ":\n" << outputs.back());
    CHECK(code == 1);
  }
  return outputs;
}

// Ranks started by hand with different world sizes waited out dist.timeout_s in the rendezvous, each
// saying a rank did not come (rank 0 of the 2-rank view 5x as long). Both fail at once now, naming the
// variable and both values.
TEST_CASE("ranks started with different world sizes fail at once, naming the variable", "[dist][e2e]") {
  const auto outputs = hand_started_ranks("world_size_mismatch", {0, 1}, {2, 3});
  for (const auto& output : outputs) {
    INFO(output);
    CHECK(output.find("the ranks of this job were started with different world sizes: rank ") != std::string::npos);
    // whichever came second names itself; the first is told by the meeting
    const auto has = [&](const char* s) { return output.find(s) != std::string::npos; };
    CHECK((has("rank 1 with WORLD_SIZE=3, rank 0 (at the store first) with WORLD_SIZE=2") ||
           has("rank 0 with WORLD_SIZE=2, rank 1 (at the store first) with WORLD_SIZE=3")));
  }
}

// A rank started twice (two nodes given the same --node-rank) waited out dist.timeout_s with the others,
// each saying a rank did not come. The second at the store says so at once, and calls the meeting off.
TEST_CASE("a rank started twice fails at once, naming both processes", "[dist][e2e]") {
  const auto outputs = hand_started_ranks("rank_twice", {0, 1, 1}, {3, 3, 3});
  // rank 0 hosts the store: it is told why, whichever rank 1 came second
  CHECK(std::regex_search(outputs.at(0),
                          std::regex(R"(rank 1 was started twice: by host [^,]+, pid \d+ and by host [^,]+, pid \d+)")));
}
