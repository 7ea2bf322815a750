// `trainer launch`: torchrun variables, rank-prefixed output, failure propagation, signal
// forwarding, no orphans. The ranks are hidden worker TEST_CASEs of this binary.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <regex>
#include <thread>

#include "device/device.hpp"
#include "dist/launcher.hpp"
#include "skip.hpp"
#include "spawn.hpp"

using namespace trainer;
using Catch::Matchers::Contains;

namespace {

std::atomic<bool> g_usr1{false};

// Waits until `log` shows `count` lines "started" (the ranks are up).
bool wait_started(const std::filesystem::path& log, int count) {
  return test::wait_for([&] {
    std::string s = test::read_file(log);
    int n = 0;
    for (size_t p = 0; (p = s.find(" started", p)) != std::string::npos; ++p) ++n;
    return n >= count;
  });
}

std::vector<pid_t> rank_pids(const std::string& log) {
  std::vector<pid_t> pids;
  std::regex re("pid ([0-9]+) started");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    pids.push_back(std::stoi((*it)[1]));
  return pids;
}

bool alive(pid_t pid) {  // a zombie waiting for init to reap it counts as dead
  std::string st = test::read_file("/proc/" + std::to_string(pid) + "/stat");
  if (st.empty()) return false;
  auto close = st.rfind(')');
  return close != std::string::npos && st.size() > close + 2 && st[close + 2] != 'Z';
}

}  // namespace

// One rank under the launcher. LAUNCH_TEST_MODE: fail (rank 1 exits 1, the others wait for
// SIGTERM), usr1 (every rank waits for SIGUSR1 then exits 75), sleep (wait to be killed).
TEST_CASE("worker: launched rank", "[.worker]") {
  if (!test::is_worker()) return;
  int rank = test::env_int("RANK");
  std::string mode = std::getenv("LAUNCH_TEST_MODE");
  std::signal(SIGUSR1, [](int) { g_usr1 = true; });
  // finish0_hang: rank 0 ends at once, the others ignore SIGTERM (hung after their last collective);
  // deaf: every rank ignores the stop signals (stopped or hung)
  if (mode == "deaf" || mode == "finish0_hang") {
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGINT, SIG_IGN);
  }
  std::printf("rank %d of %s (local %s of %s) at %s:%s pid %d started\n", rank, std::getenv("WORLD_SIZE"),
              std::getenv("LOCAL_RANK"), std::getenv("LOCAL_WORLD_SIZE"), std::getenv("MASTER_ADDR"),
              std::getenv("MASTER_PORT"), static_cast<int>(::getpid()));
  std::fflush(stdout);
  if (mode == "finish0_hang" && rank == 0) std::_Exit(0);
  if (mode == "fail" && rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::fprintf(stderr, "rank 1 fails on purpose\n");
    std::_Exit(1);
  }
  // until a signal (SIGUSR1 here, the launcher's SIGTERM ends it); the cap only ends a forgotten worker
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(test::scaled(600));
  while (!g_usr1 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (g_usr1) {
    std::printf("rank %d got SIGUSR1\n", rank);
    std::fflush(stdout);
    std::_Exit(75);
  }
  std::printf("rank %d finished\n", rank);
  std::_Exit(0);
}

// The launcher itself, as `trainer launch -n 3 -- <worker: launched rank>` would run it.
TEST_CASE("worker: launcher", "[.worker]") {
  if (!test::is_worker()) return;
  dist::LaunchOptions o;
  o.nprocs = 3;
  o.grace_s = 3;
  if (const char* linger = std::getenv("LAUNCH_TEST_LINGER")) o.linger_s = std::stod(linger);
  std::fflush(stdout);
  int rc = dist::launch_local(o, {"worker: launched rank"});
  std::fflush(stdout);
  std::_Exit(rc);
}

TEST_CASE("launch: rank 1 exits 1, the others are terminated and the launcher exits 1", "[dist]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("launch_fail");
  auto p = test::spawn_self("worker: launcher", {{"LAUNCH_TEST_MODE", "fail"}}, dir / "launcher.log");
  test::wait_proc(p, 60);
  std::string out = p.output();
  INFO(out);
  CHECK(p.exit_code == 1);  // not 137: the others wait for a signal, wait_proc would have killed the launcher
  CHECK_THAT(out, Contains("[rank1] rank 1 fails on purpose"));
  CHECK_THAT(out, Contains("launch: rank 1 exited with code 1; terminating the other ranks"));
  CHECK(out.find("finished") == std::string::npos);
  // torchrun's variables, one set per rank
  for (int r = 0; r < 3; ++r)
    CHECK_THAT(out, Contains("[rank" + std::to_string(r) + "] rank " + std::to_string(r) + " of 3 (local " +
                             std::to_string(r) + " of 3) at 127.0.0.1:"));
  auto pids = rank_pids(out);
  CHECK(pids.size() == 3);
  for (pid_t pid : pids) CHECK_FALSE(alive(pid));
}

// Found from outside: a rank stopped after rank 0 ended held the launcher forever, and a SIGTERM to the
// launcher, forwarded to ranks that could not act on it, was never followed by SIGKILL.
TEST_CASE("launch: ranks that outlive rank 0's clean end by linger_s are ended, exit 1", "[dist]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("launch_linger_end");
  const auto t0 = std::chrono::steady_clock::now();
  auto p = test::spawn_self("worker: launcher", {{"LAUNCH_TEST_MODE", "finish0_hang"}, {"LAUNCH_TEST_LINGER", "2"}},
                            dir / "launcher.log");
  test::wait_proc(p, 120);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string out = p.output();
  INFO(out);
  CHECK(p.exit_code == 1);
  CHECK_THAT(out, Contains("launch: rank 0 finished 2 s ago (the ranks' dist.timeout_s and 30 s) and ranks of this "
                           "node still run: stopped or hung after their last collective; terminating them"));
  CHECK_THAT(out, Contains("launch: ranks still running after the grace period; sending SIGKILL"));  // deaf to SIGTERM
  CHECK(s < test::scaled(60));
  for (pid_t pid : rank_pids(out)) CHECK_FALSE(alive(pid));
}

TEST_CASE("launch: ranks deaf to a forwarded stop signal get SIGKILL after linger_s, exit non-zero", "[dist]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("launch_linger_stop");
  auto p = test::spawn_self("worker: launcher", {{"LAUNCH_TEST_MODE", "deaf"}, {"LAUNCH_TEST_LINGER", "2"}},
                            dir / "launcher.log");
  REQUIRE(wait_started(p.log, 3));
  ::kill(p.pid, SIGTERM);
  test::wait_proc(p, 120);
  std::string out = p.output();
  INFO(out);
  CHECK(p.exit_code != 0);
  CHECK(p.exit_code != 75);
  CHECK_THAT(out, Contains("launch: ranks still running 2 s after the stop signal (the ranks' dist.timeout_s and 30 s): "
                           "stopped or hung; sending SIGKILL"));
  for (pid_t pid : rank_pids(out)) CHECK_FALSE(alive(pid));
}

TEST_CASE("launch: SIGUSR1 is forwarded to every rank", "[dist]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("launch_usr1");
  auto p = test::spawn_self("worker: launcher", {{"LAUNCH_TEST_MODE", "usr1"}}, dir / "launcher.log");
  REQUIRE(wait_started(p.log, 3));
  ::kill(p.pid, SIGUSR1);
  test::wait_proc(p, 60);
  std::string out = p.output();
  INFO(out);
  CHECK(p.exit_code == 75);  // every rank saved and asked to be requeued
  for (int r = 0; r < 3; ++r) CHECK_THAT(out, Contains("[rank" + std::to_string(r) + "] rank " + std::to_string(r) + " got SIGUSR1"));
}

TEST_CASE("launch: no orphans when the launcher is killed with SIGKILL", "[dist]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("launch_orphans");
  auto p = test::spawn_self("worker: launcher", {{"LAUNCH_TEST_MODE", "sleep"}}, dir / "launcher.log");
  REQUIRE(wait_started(p.log, 3));
  auto pids = rank_pids(p.output());
  REQUIRE(pids.size() == 3);
  ::kill(p.pid, SIGKILL);
  test::wait_proc(p, 10);
  // PR_SET_PDEATHSIG: the kernel kills them as the launcher dies; they are gone soon after
  CHECK(test::wait_for([&] { return std::none_of(pids.begin(), pids.end(), alive); }, 60));
  for (pid_t pid : pids) CHECK_FALSE(alive(pid));
}

TEST_CASE("trainer launch -n 2 -- env: each rank sees torchrun's variables, output prefixed", "[dist]") {
  if (test::is_worker()) return;
  auto r = test::run_trainer("launch -n 2 -- env");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("[rank0] Launcher: trainer launch (rank 0 of 2, local rank 0 of 2), master 127.0.0.1:"));
  CHECK_THAT(r.output, Contains("[rank1] Launcher: trainer launch (rank 1 of 2, local rank 1 of 2), master 127.0.0.1:"));
}

TEST_CASE("trainer launch without a command is a usage error", "[unit]") {
  if (test::is_worker()) return;
  auto r = test::run_trainer("launch -n 2");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("args is required"));
}

// A mistyped -n 1000 forked ranks until the machine stalled (found from outside): far more ranks than
// cores are refused before anything starts, unless asked for.
TEST_CASE("trainer launch: -n far above the cores is refused without --oversubscribe", "[dist][e2e]") {
  auto dir = test::scratch_dir("launch_too_many");
  const int n = static_cast<int>(std::max<int64_t>(trainer::dist::kMinRankLimit,
                                                   trainer::dist::kMaxRanksPerCore * trainer::device::usable_cpus())) + 1;
  auto r = test::run_shell("\"" + std::string(TRAINER_BIN) + "\" launch -n " + std::to_string(n) +
                           " -- run /nonexistent.yaml 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("launch: -n " + std::to_string(n) + " ranks on " + std::to_string(trainer::device::usable_cpus()) +
                      " usable core(s) is more than 8 per core: refused as a likely typo") != std::string::npos);
  CHECK(r.output.find("pass --oversubscribe to start them anyway") != std::string::npos);
  CHECK(r.output.find("[rank") == std::string::npos);  // nothing started
}

// A stop signal while the ranks start (a mistyped -n 1000 on a laptop): the ranks started get it and no
// more are started; it went on forking for as long as -n asked (found from outside). The signal is made
// pending before the launcher starts (blocked across exec), so it is there after the first rank.
TEST_CASE("trainer launch: a stop signal while the ranks start starts no more of them", "[dist][e2e]") {
  if (test::run_shell("command -v python3").exit_code != 0) TRAINER_SKIP("no python3 to start the launcher with a signal pending");
  auto dir = test::scratch_dir("launch_stop_while_starting");
  test::write_file(dir / "c.yaml", "run: {name: s, out_dir: " + (dir / "runs").string() + "}\n"
                                   "model: {arch: gpt, vocab_size: 64, block_size: 8, n_layer: 1, n_head: 1, n_embd: 8}\n"
                                   "data: {format: synthetic, workers: 0, synthetic: {num_samples: 64, val_samples: 0}}\n"
                                   "train: {batch_size: 2, max_steps: 5, threads: 1}\nlog: {progress: off}\n");
  const std::string py = "import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM]); "
                         "os.kill(os.getpid(), signal.SIGTERM); os.execv(sys.argv[1], sys.argv[1:])";
  auto r = test::run_shell("python3 -c '" + py + "' \"" + TRAINER_BIN + "\" launch -n 64 --oversubscribe -- run " +
                           (dir / "c.yaml").string() + " 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 75);  // the started rank: stopped during start-up, nothing to save
  CHECK(r.output.find("launch: a stop signal while starting the ranks: 1 of 64 started, no more are") != std::string::npos);
}
