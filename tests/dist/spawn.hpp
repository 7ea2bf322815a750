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

// Reaps `p` if it has ended (exit_code set); false while it runs.
inline bool reap_proc(Proc& p) {
  if (p.exit_code >= 0) return true;
  int status = 0;
  if (::waitpid(p.pid, &status, WNOHANG) != p.pid) return false;
  p.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count();
  return true;
}

// Waits for `p` up to `limit_s` (scaled: test_util.hpp); kills it with SIGKILL past that (exit_code
// then 128 + 9).
inline void wait_proc(Proc& p, double limit_s) {
  while (!reap_proc(p)) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count() > scaled(limit_s))
      ::kill(p.pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Rank 0 could not listen on the port free_local_port found: another process took it in between
// (the port is only chosen here, bound later by the rank). The other ranks would wait for the
// rendezvous until their time-out, so run_ranks starts them all again on another port.
inline bool lost_port_race(const Proc& rank0) {
  if (rank0.exit_code <= 0) return false;
  const auto out = rank0.output();
  return out.find("rendezvous: cannot listen on") != std::string::npos &&
         out.find("Address already in use") != std::string::npos;
}

// `world` ranks of one worker test on loopback, as torchrun would start them.
inline std::vector<Proc> run_ranks(const std::string& test_name, int world, const std::string& dir_name,
                                   double limit_s = 300, std::map<std::string, std::string> extra = {}) {
  auto dir = scratch_dir(dir_name);
  for (int attempt = 1;; ++attempt) {
    const int port = dist::free_local_port();
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
    const bool may_retry = attempt < 3;
    if (!may_retry) {
      for (auto& p : procs) wait_proc(p, limit_s);
      return procs;
    }
    // as wait_proc, all at once, looking once at rank 0's end for a lost port
    bool rank0_seen = false;
    for (;;) {
      bool running = false;
      for (auto& p : procs) running = !reap_proc(p) || running;
      if (!rank0_seen && procs[0].exit_code >= 0) {
        rank0_seen = true;
        if (lost_port_race(procs[0])) break;
      }
      if (!running) return procs;
      for (auto& p : procs)
        if (p.exit_code < 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count() >
                                   scaled(limit_s))
          ::kill(p.pid, SIGKILL);  // wait_proc's limit
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (auto& p : procs)
      if (p.exit_code < 0) ::kill(p.pid, SIGKILL);
    for (auto& p : procs) wait_proc(p, limit_s);
  }
}

}  // namespace trainer::test
