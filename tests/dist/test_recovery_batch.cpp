// dist.recovery in_process: the global batch each world size aims at (recovery_runs.hpp).
#include <catch2/catch.hpp>

#include <signal.h>

#include <map>
#include <regex>

#include "dist/launcher.hpp"
#include "recovery_runs.hpp"

namespace fs = std::filesystem;
using namespace trainer;
using namespace trainer::test::recovery;

// Every world size aims at train.global_batch_size. It aimed at the current world's samples per step:
// after a size that did not divide the global batch (3 ranks of 2 for 8: 6 a step) the next (2
// ranks) kept that and trained at 4 a step to the end, and a grown group at twice the global batch
// (found from outside, 2026-12-07). 4 ranks, then 3 (6 a step), then 2 (8 again: 2 accumulations).
TEST_CASE("in-process recovery: every world size aims at train.global_batch_size, not the last world's", "[dist][e2e]") {
  auto dir = test::scratch_dir("recovery_target_batch");
  std::string yaml = test::read_file(long_config(dir));
  yaml.replace(yaml.find("global_batch_size: 24"), 21, "global_batch_size: 8");
  yaml.replace(yaml.find("log_every: 10"), 13, "log_every: 1");
  test::write_file(dir / "target.yaml", yaml);
  const auto run = dir / "out" / "tiny";
  test::start_trainer("launch -n 4 -- run " + (dir / "target.yaml").string() + " --out-dir " + (dir / "out").string(),
                      dir / "job.log", dir / "job.rc", "TRAINER_INJECT_KILL=3:vote:10");
  // launch rank 2 once the group runs at 3: killed by the test (an injected kill acts in the first group only)
  pid_t rank2 = 0;
  REQUIRE(test::wait_for([&] {
    const auto log = test::read_file(run / "logs/rank2.log");
    std::smatch m;
    if (!std::regex_search(log, m, std::regex(R"(member 2 \(pid (\d+)\) continues as rank \d of 3)"))) return false;
    rank2 = static_cast<pid_t>(std::stol(m[1]));
    return records_at_world_after_change(run_records(run, "train"), 3) >= 2;
  }));
  REQUIRE(::kill(rank2, SIGKILL) == 0);
  // then 5 steps at 2 ranks, and the stop
  REQUIRE(test::wait_for([&] { return records_at_world_after_change(run_records(run, "train"), 2) >= 5; }));
  stop_job(run);
  const int rc = test::wait_rc(dir / "job.rc");
  INFO(test::read_file(dir / "job.log"));
  CHECK(rc == 75);
  std::map<int64_t, int> worlds;  // world size -> steps
  int64_t samples = 0;
  for (const auto& rec : run_records(run, "train")) {
    INFO(rec.dump());
    const int64_t w = rec.at("world_size");
    ++worlds[w];
    samples += w == 3 ? 6 : 8;  // 2 x 1 x 3 (8 does not divide by 6), else 8 (2 x 1 x 4, 2 x 2 x 2)
    CHECK(rec.at("samples") == samples);
  }
  CHECK(worlds.size() == 3);
  CHECK(test::read_file(run / "logs/rank0.log")
            .find("2 x 2 accumulation x 2 ranks = 8 samples per step (global batch kept)") != std::string::npos);
}


// Node 0's launcher hosts the store: when it dies, in-process recovery cannot agree on anything. The
// other node's rank said only "error: Broken pipe" (found from outside); it now names the store and why.
// Two "nodes" on this host (--nnodes 2 over loopback), one rank each.
TEST_CASE("in-process recovery: node 0's launcher killed, the other node's rank names the lost store", "[dist][e2e]") {
  auto dir = test::scratch_dir("recovery_store_lost");
  const auto cfg = long_config(dir);
  const std::string port = std::to_string(trainer::dist::free_local_port());
  auto node = [&](int n) {
    test::start_trainer("launch -n 1 --nnodes 2 --node-rank " + std::to_string(n) + " --master-addr 127.0.0.1 "
                        "--master-port " + port + " -- run " + cfg + " --out-dir " + (dir / "out").string(),
                        dir / ("node" + std::to_string(n) + ".log"), dir / ("node" + std::to_string(n) + ".rc"));
  };
  node(0);
  node(1);
  const auto run = dir / "out" / "tiny";
  REQUIRE(test::wait_for([&] { return run_records(run, "train").size() >= 2; }));
  const pid_t rank0 = test::lock_holder(run / ".lock");
  REQUIRE(rank0 > 0);
  const auto stat = test::read_file("/proc/" + std::to_string(rank0) + "/stat");
  REQUIRE(::kill(static_cast<pid_t>(std::stol(stat.substr(stat.rfind(')') + 4))), SIGKILL) == 0);
  const int rc = test::wait_rc(dir / "node1.rc");
  const auto log = test::read_file(dir / "node1.log");
  INFO(log);
  CHECK(rc == 1);
  CHECK(log.find("the rendezvous store cannot be reached (") != std::string::npos);
  CHECK(log.find("It lives in node 0's launcher (or torchrun's agent), which is gone or cut off") != std::string::npos);
}
