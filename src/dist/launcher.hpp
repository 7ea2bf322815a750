// `trainer launch -n N [--nnodes M --node-rank R --master-addr A] [--master-port P] [--max-restarts K]
// -- run CONFIG ...`: a torchrun-style spawner of this node's ranks (static rendezvous: every node
// runs one launcher with the same --nnodes, --master-addr and --master-port).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dist/launch_env.hpp"
#include "dist/net_iface.hpp"  // free_local_port

namespace trainer::dist {

// More ranks on a node than this many per usable core (and more than kMinRankLimit) are refused
// without --oversubscribe: a mistyped -n 1000 forked processes, each with its own model, until the
// machine stalled (found from outside). Checking a layout of 8 ranks on a 2-core laptop still runs.
inline constexpr int kMaxRanksPerCore = 8;
inline constexpr int kMinRankLimit = 16;

struct LaunchOptions {
  int nprocs = 1;                     // ranks on this node
  int nnodes = 1;                     // nodes of the job, each with its own launcher
  int node_rank = 0;                  // this node: ranks node_rank * nprocs ... + nprocs - 1
  std::string master_addr = "127.0.0.1";  // node 0's address (it hosts the store as rank 0)
  int master_port = 0;                // 0 = a free port on 127.0.0.1 (one node), 29500 (several)
  int max_restarts = 0;               // a failed group is started again up to this many times
                                      // (dist.recovery in_process: replacement ranks started)
  bool join = false;                  // this node's ranks join a running job (in_process)
  bool oversubscribe = false;         // start more ranks than kMaxRanksPerCore x the usable cores
  std::string exe = "/proc/self/exe"; // the program each rank runs
  double grace_s = 10.0;              // SIGTERM -> SIGKILL delay when a rank failed
  // How long ranks may outlive a forwarded stop signal (then SIGKILL), or rank 0's clean end on node 0
  // (then ended, exit 1): 0 = the ranks' dist.timeout_s and 30 s, read by the preflight (330 s unread).
  double linger_s = 0;
  // Called once before any rank starts, with the environment the first of this node's ranks will
  // see: the rank command's own checks (a config error said once, not by every rank). nullopt: start
  // the ranks; a code: launch exits with it and starts nothing. It may set the ranks' dist.timeout_s:
  // a node other than node 0 then ends its ranks once node 0's store has not answered for that long
  // and 30 s more (a hung rank the others regrouped without, or a job that ended, held the node forever).
  std::function<std::optional<int>(const LaunchEnv&, double* timeout_s)> preflight;
};

// Spawns `nprocs` ranks of `exe child_args...` with torchrun's variables (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT),
// prefixes each output line with "[rankN] " (the global rank), forwards SIGINT/SIGTERM/SIGUSR1/
// SIGHUP to every rank, and when a rank fails terminates the others (SIGTERM, then SIGKILL after
// grace_s), then starts the group again while restarts are left (never after a stop signal or an
// exit 75). Returns the last attempt's first failing exit code (128+sig when killed by a signal),
// else 0. Children die with the launcher (PR_SET_PDEATHSIG).
int launch_local(const LaunchOptions& opts, const std::vector<std::string>& child_args);

// The CLI entry point: launch_local, usage errors exit 2.
int cmd_launch(LaunchOptions opts, const std::vector<std::string>& child_args);

}  // namespace trainer::dist
