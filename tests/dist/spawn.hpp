// Multi-process tests: the test binary re-runs itself with one hidden worker TEST_CASE per process
// (tag [.worker]), with the launcher variables of its rank. Workers return at once when
// TRAINER_DIST_WORKER is unset, so running the whole binary by hand stays harmless.
#pragma once

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "dist/launcher.hpp"
#include "test_util.hpp"

namespace trainer::test {

inline bool is_worker() { return std::getenv("TRAINER_DIST_WORKER") != nullptr; }
inline int env_int(const char* name) { return std::atoi(std::getenv(name)); }

struct Proc {
  pid_t pid = -1;
  std::filesystem::path log;
  int exit_code = -1;  // 128 + signal when killed
  double seconds = 0;  // from start to exit
  std::chrono::steady_clock::time_point started;
  std::string output() const { return read_file(log); }
};

// Starts `/proc/self/exe <catch_test_name>` with `env` added; stdout and stderr go to `log`.
inline Proc spawn_self(const std::string& test_name, const std::map<std::string, std::string>& env,
                       const std::filesystem::path& log) {
  Proc p;
  p.log = log;
  p.started = std::chrono::steady_clock::now();
  p.pid = ::fork();
  if (p.pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    ::dup2(fileno(f), 1);
    ::dup2(fileno(f), 2);
    ::setenv("TRAINER_DIST_WORKER", "1", 1);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::execl("/proc/self/exe", "test_dist", test_name.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return p;
}

// Waits for `p` up to `limit_s` (scaled: test_util.hpp); kills it with SIGKILL past that (exit_code
// then 128 + 9).
inline void wait_proc(Proc& p, double limit_s) {
  limit_s = scaled(limit_s);
  using Clock = std::chrono::steady_clock;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) {
      p.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      p.seconds = std::chrono::duration<double>(Clock::now() - p.started).count();
      return;
    }
    if (std::chrono::duration<double>(Clock::now() - p.started).count() > limit_s) ::kill(p.pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// `world` ranks of one worker test on loopback, as torchrun would start them.
inline std::vector<Proc> run_ranks(const std::string& test_name, int world, const std::string& dir_name,
                                   double limit_s = 300, std::map<std::string, std::string> extra = {}) {
  auto dir = scratch_dir(dir_name);
  int port = dist::free_local_port();
  std::vector<Proc> procs;
  for (int r = 0; r < world; ++r) {
    auto env = extra;
    env["RANK"] = std::to_string(r);
    env["LOCAL_RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = std::to_string(world);
    env["LOCAL_WORLD_SIZE"] = std::to_string(world);
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(port);
    env["TRAINER_TEST_DIR"] = dir.string();
    procs.push_back(spawn_self(test_name, env, dir / ("rank" + std::to_string(r) + ".log")));
  }
  for (auto& p : procs) wait_proc(p, limit_s);
  return procs;
}

}  // namespace trainer::test
