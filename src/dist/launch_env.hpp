// Which launcher started this process, read from its environment variables.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::dist {

struct LaunchEnv {
  std::string launcher = "none";  // none | torchrun | openmpi | mpich | slurm
  int64_t rank = 0;
  int64_t world_size = 1;
  std::string world_size_var = "WORLD_SIZE";  // the variable world_size was read from (messages)
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::string master_addr;  // "" when the launcher gives none (single process, or mpirun + FileStore)
  int master_port = 0;
  // torchrun: its agent already hosts the TCPStore at MASTER_ADDR:MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True), so every rank connects as a client, keys prefixed by the
  // restart attempt (TORCHELASTIC_RESTART_COUNT) so that a restarted group never reads stale keys.
  bool agent_store = false;
  int64_t restart_count = 0;
  // `trainer launch` hosts the store itself (TRAINER_LAUNCH_STORE=1): it outlives every rank, and the
  // launcher marks a rank whose process ended (dist.recovery in_process).
  bool launcher_store = false;
  // A replacement rank `trainer launch` started for a dead one (TRAINER_JOIN=<n>, its n-th for this
  // rank; dist.recovery in_process): it joins the running group instead of meeting it at start.
  int64_t join_incarnation = 0;
  // What every rank of this job sees and a later job does not (the launcher's job or run id, the
  // rendezvous address): it names the job's keys in a dist.store file, so that one left by a
  // crashed job is not read as this job's. "" when the launcher gives nothing of the kind.
  std::string job_id;
};

// Whether this process writes the run's shared files from the start (the run directory's lock,
// config.yaml, metrics.jsonl, autotune.json, checkpoints): rank 0, unless it is a replacement that
// joins a running group (the group's rank 0 keeps writing; a joiner never becomes rank 0 by joining).
inline bool writes_run_files(const LaunchEnv& e) { return e.rank == 0 && e.join_incarnation == 0; }

// A launcher's variables are missing or contradict each other. Names the launcher and the variable.
class LaunchEnvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using GetEnv = std::function<const char*(const char*)>;

// torchrun (RANK/WORLD_SIZE/...) wins over SLURM, which wins over MPI: srun inside mpirun is rare,
// torchrun inside an sbatch step is common. Throws LaunchEnvError.
LaunchEnv detect_launch_env(const GetEnv& getenv_fn);
LaunchEnv detect_launch_env();  // from the process environment

// Several ranks need a place to meet: MASTER_ADDR and MASTER_PORT (a TCPStore), or `dist_store`
// file:///path. Called before anything is created, so that a launch without one is a usage error.
// Throws LaunchEnvError.
void check_rendezvous(const LaunchEnv& env, const std::string& dist_store);

// dist.recovery in_process with several ranks needs `trainer launch` (env.launcher_store). Called
// before anything is created. Throws LaunchEnvError.
void check_recovery_launcher(const LaunchEnv& env, bool in_process);

// SLURM hostlist expansion: "gpu[01-04,07],login1" -> gpu01 gpu02 gpu03 gpu04 gpu07 login1.
std::vector<std::string> expand_hostlist(const std::string& list);

// "localhost", "::1" or 127.x.y.z: an address only this machine can reach.
bool is_loopback(const std::string& addr);

}  // namespace trainer::dist
