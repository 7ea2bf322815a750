#include "dist/launch_env.hpp"

#include <algorithm>
#include <cstdlib>

namespace trainer::dist {
namespace {

struct Reader {
  const GetEnv& get;
  std::string launcher;

  bool has(const char* name) const {
    const char* v = get(name);
    return v && *v;
  }
  std::string str(const char* name) const {
    const char* v = get(name);
    if (!v || !*v) throw LaunchEnvError(launcher + " launch: environment variable " + name + " is not set");
    return v;
  }
  int64_t integer(const char* name) const {
    std::string v = str(name);
    char* end = nullptr;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || x < 0)
      throw LaunchEnvError(launcher + " launch: " + name + "='" + v + "' is not a non-negative integer");
    return x;
  }
  int64_t integer_or(const char* name, int64_t fallback) const { return has(name) ? integer(name) : fallback; }
};

void check(LaunchEnv& e, const Reader& r, const char* rank_var, const char* world_var) {
  e.world_size_var = world_var;
  if (e.world_size < 1) throw LaunchEnvError(r.launcher + " launch: " + world_var + " must be >= 1");
  if (e.rank >= e.world_size)
    throw LaunchEnvError(r.launcher + " launch: " + rank_var + "=" + std::to_string(e.rank) + " is not below " +
                         world_var + "=" + std::to_string(e.world_size));
  if (e.local_world_size < 1 || e.local_rank >= e.local_world_size)
    throw LaunchEnvError(r.launcher + " launch: local rank " + std::to_string(e.local_rank) +
                         " is not below the local world size " + std::to_string(e.local_world_size));
  if (e.local_world_size > e.world_size)
    throw LaunchEnvError(r.launcher + " launch: local world size " + std::to_string(e.local_world_size) +
                         " exceeds the world size " + std::to_string(e.world_size));
}

int parse_port(const Reader& r, const char* name) {
  int64_t p = r.integer(name);
  if (p < 1 || p > 65535) throw LaunchEnvError(r.launcher + " launch: " + name + " must be a port in 1..65535");
  return static_cast<int>(p);
}

// Variables a launcher gives every rank of one job alike, and the next job (or restart) differently.
// Per-rank or per-node variables must not be here: ranks that disagree would never meet.
std::string job_identity(const GetEnv& get) {
  static const char* kJobWide[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",  "SLURM_STEP_ID", "SLURM_RESTART_COUNT",
                                   "PMIX_NAMESPACE",      "OMPI_MCA_ess_base_jobid",       "MASTER_ADDR",
                                   "MASTER_PORT"};
  std::string id;
  for (const char* name : kJobWide)
    if (const char* v = get(name); v && *v) id += (id.empty() ? "" : ",") + std::string(name) + "=" + v;
  return id;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> out;
  // split on commas that are not inside brackets
  std::vector<std::string> items;
  int depth = 0;
  std::string cur;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      if (!cur.empty()) items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) items.push_back(cur);
  for (const auto& item : items) {
    auto lb = item.find('[');
    if (lb == std::string::npos) {
      out.push_back(item);
      continue;
    }
    auto rb = item.find(']', lb);
    if (rb == std::string::npos) throw LaunchEnvError("slurm hostlist '" + list + "': unbalanced '['");
    std::string prefix = item.substr(0, lb), suffix = item.substr(rb + 1);
    std::string ranges = item.substr(lb + 1, rb - lb - 1);
    size_t b = 0;
    while (b <= ranges.size()) {
      size_t e = ranges.find(',', b);
      if (e == std::string::npos) e = ranges.size();
      std::string r = ranges.substr(b, e - b);
      auto dash = r.find('-');
      std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
      if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
          hi.find_first_not_of("0123456789") != std::string::npos)
        throw LaunchEnvError("slurm hostlist '" + list + "': bad range '" + r + "'");
      long a = std::stol(lo), z = std::stol(hi);
      if (z < a) throw LaunchEnvError("slurm hostlist '" + list + "': descending range '" + r + "'");
      for (long n = a; n <= z; ++n) {
        std::string num = std::to_string(n);
        if (num.size() < lo.size()) num = std::string(lo.size() - num.size(), '0') + num;  // keep zero padding
        out.push_back(prefix + num + suffix);
      }
      b = e + 1;
    }
  }
  return out;
}

LaunchEnv detect_launch_env(const GetEnv& getenv_fn) {
  LaunchEnv e;
  Reader r{getenv_fn, ""};
  if (r.has("RANK") || r.has("WORLD_SIZE") || r.has("LOCAL_RANK") || r.has("TORCHELASTIC_RUN_ID")) {
    r.launcher = e.launcher = "torchrun";
    e.rank = r.integer("RANK");
    e.world_size = r.integer("WORLD_SIZE");
    e.local_rank = r.integer_or("LOCAL_RANK", 0);
    e.local_world_size = r.integer_or("LOCAL_WORLD_SIZE", e.world_size);
    if (e.world_size > 1) {
      e.master_addr = r.str("MASTER_ADDR");
      e.master_port = parse_port(r, "MASTER_PORT");
    }
    e.agent_store = r.has("TORCHELASTIC_USE_AGENT_STORE") && std::string(getenv_fn("TORCHELASTIC_USE_AGENT_STORE")) == "True";
    e.restart_count = r.integer_or("TORCHELASTIC_RESTART_COUNT", 0);
    // our own launcher: torchrun's variables, and a store it hosts itself (like torchrun's agent)
    if (r.has("TRAINER_LAUNCH_STORE") && std::string(getenv_fn("TRAINER_LAUNCH_STORE")) == "1") {
      e.launcher = "trainer launch";
      e.launcher_store = e.agent_store = true;
      e.join_incarnation = r.integer_or("TRAINER_JOIN", 0);
    }
    check(e, r, "RANK", "WORLD_SIZE");
  } else if (r.has("SLURM_PROCID") && r.has("SLURM_NTASKS")) {
    r.launcher = e.launcher = "slurm";
    e.rank = r.integer("SLURM_PROCID");
    e.world_size = r.integer("SLURM_NTASKS");
    e.local_rank = r.integer_or("SLURM_LOCALID", 0);
    if (r.has("SLURM_NTASKS_PER_NODE") &&
        std::string(getenv_fn("SLURM_NTASKS_PER_NODE")).find_first_not_of("0123456789") == std::string::npos)
      e.local_world_size = r.integer("SLURM_NTASKS_PER_NODE");
    else if (r.has("SLURM_NNODES"))
      e.local_world_size = std::max<int64_t>(1, e.world_size / std::max<int64_t>(1, r.integer("SLURM_NNODES")));
    else
      e.local_world_size = e.world_size;
    e.local_world_size = std::max(e.local_world_size, e.local_rank + 1);
    if (e.world_size > 1) {
      e.master_addr = r.has("MASTER_ADDR") ? r.str("MASTER_ADDR") : expand_hostlist(r.str("SLURM_JOB_NODELIST")).at(0);
      // a port derived from the job id, so concurrent jobs on shared nodes do not collide, and from the
      // step, so do several srun steps of one job (found from outside: the second step's rank 0 could not
      // listen, or both steps' ranks met each other); step 0 keeps 20000 + job id mod 20000
      const int64_t step = r.has("SLURM_STEP_ID") ? r.integer("SLURM_STEP_ID") : r.integer_or("SLURM_STEPID", 0);
      e.master_port = r.has("MASTER_PORT")
                          ? parse_port(r, "MASTER_PORT")
                          : static_cast<int>(20000 + (r.integer("SLURM_JOB_ID") + step * 10007) % 20000);
    }
    check(e, r, "SLURM_PROCID", "SLURM_NTASKS");
    // the batch script of a job of several tasks has the job's SLURM_NTASKS and SLURM_PROCID=0, but it
    // is no task: `trainer run` there waited dist.timeout_s as rank 0 of N for ranks that never came
    if (e.world_size > 1 && !r.has("SLURM_STEP_ID") && !r.has("SLURM_STEPID"))
      throw LaunchEnvError("slurm launch: SLURM_NTASKS=" + std::to_string(e.world_size) +
                           ", but this process is not one of the job's tasks (no SLURM_STEP_ID: the batch script "
                           "itself?). Start the ranks with `srun trainer run ...`, or with `trainer launch -n N -- "
                           "run ...` from the script");
  } else if (r.has("OMPI_COMM_WORLD_RANK") || r.has("OMPI_COMM_WORLD_SIZE")) {
    r.launcher = e.launcher = "openmpi";
    e.rank = r.integer("OMPI_COMM_WORLD_RANK");
    e.world_size = r.integer("OMPI_COMM_WORLD_SIZE");
    e.local_rank = r.integer_or("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    e.local_world_size = r.integer_or("OMPI_COMM_WORLD_LOCAL_SIZE", e.world_size);
    if (r.has("MASTER_ADDR")) {
      e.master_addr = r.str("MASTER_ADDR");
      e.master_port = r.has("MASTER_PORT") ? parse_port(r, "MASTER_PORT") : 29500;
    }
    check(e, r, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  } else if (r.has("PMI_RANK") || r.has("PMI_SIZE")) {
    r.launcher = e.launcher = "mpich";
    e.rank = r.integer("PMI_RANK");
    e.world_size = r.integer("PMI_SIZE");
    e.local_rank = r.integer_or("MPI_LOCALRANKID", 0);
    e.local_world_size = r.integer_or("MPI_LOCALNRANKS", e.world_size);
    if (r.has("MASTER_ADDR")) {
      e.master_addr = r.str("MASTER_ADDR");
      e.master_port = r.has("MASTER_PORT") ? parse_port(r, "MASTER_PORT") : 29500;
    }
    check(e, r, "PMI_RANK", "PMI_SIZE");
  }
  if (e.world_size > 1) e.job_id = job_identity(getenv_fn);
  return e;
}

LaunchEnv detect_launch_env() {
  return detect_launch_env([](const char* n) -> const char* { return std::getenv(n); });
}

void check_rendezvous(const LaunchEnv& env, const std::string& dist_store) {
  if (env.world_size <= 1 || !dist_store.empty()) return;
  if (env.master_addr.empty() || env.master_port == 0)
    throw LaunchEnvError(env.launcher + " launch with " + std::to_string(env.world_size) +
                         " ranks: no rendezvous address; set MASTER_ADDR and MASTER_PORT (mpirun -x MASTER_ADDR=... "
                         "-x MASTER_PORT=...), or dist.store: file:///shared/path");
}

void check_recovery_launcher(const LaunchEnv& env, bool in_process) {
  if (env.world_size <= 1 || !in_process || env.launcher_store) return;
  throw LaunchEnvError("dist.recovery: in_process needs `trainer launch` (this job was started by " + env.launcher +
                       "): it hosts the store that outlives every rank and keeps the survivors running when a rank "
                       "dies, where torchrun's agent, mpirun and srun stop every rank; use dist.recovery: restart");
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

}  // namespace trainer::dist
