// `trainer launch -n N [--master-port P] -- run CONFIG ...`: a local torchrun-style spawner.
#pragma once

#include <string>
#include <vector>

namespace trainer::dist {

struct LaunchOptions {
  int nprocs = 1;
  int master_port = 0;                // 0 = a free port on 127.0.0.1
  std::string exe = "/proc/self/exe"; // the program each rank runs
  double grace_s = 10.0;              // SIGTERM -> SIGKILL delay when a rank failed
};

// Spawns `nprocs` ranks of `exe child_args...` with torchrun's variables (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT), prefixes each output line with
// "[rankN] ", forwards SIGINT/SIGTERM/SIGUSR1 to every rank, and when a rank fails terminates the
// others (SIGTERM, then SIGKILL after grace_s). Returns the first failing rank's exit code (128+sig
// when killed by a signal), else 0. Children die with the launcher (PR_SET_PDEATHSIG).
int launch_local(const LaunchOptions& opts, const std::vector<std::string>& child_args);

// The CLI entry point: launch_local with this executable.
int cmd_launch(int nprocs, int master_port, const std::vector<std::string>& child_args);

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice).
int free_local_port();

}  // namespace trainer::dist
