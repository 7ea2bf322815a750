// Launcher detection table: each launcher's variables give the right rank, world, local rank and
// master; SLURM hostlists expand; missing or contradictory variables name the launcher and variable.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "dist/launch_env.hpp"

using trainer::dist::detect_launch_env;
using trainer::dist::expand_hostlist;
using trainer::dist::LaunchEnv;
using trainer::dist::LaunchEnvError;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {

LaunchEnv detect(const std::map<std::string, std::string>& vars) {
  return detect_launch_env([&](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    detect(vars);
  } catch (const LaunchEnvError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("no launcher variables: a single process", "[unit]") {
  auto e = detect({{"HOME", "/root"}});
  CHECK(e.launcher == "none");
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.master_addr.empty());
}

TEST_CASE("torchrun variables", "[unit]") {
  auto e = detect({{"RANK", "5"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"},
                   {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29400"}});
  CHECK(e.launcher == "torchrun");
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "node0");
  CHECK(e.master_port == 29400);
}

TEST_CASE("OpenMPI variables, master from MASTER_ADDR with the default port", "[unit]") {
  auto e = detect({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}});
  CHECK(e.launcher == "openmpi");
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.master_addr == "10.0.0.1");
  CHECK(e.master_port == 29500);
}

TEST_CASE("OpenMPI without MASTER_ADDR leaves the rendezvous to dist.store", "[unit]") {
  auto e = detect({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  CHECK(e.launcher == "openmpi");
  CHECK(e.master_addr.empty());
  CHECK(e.master_port == 0);
}

TEST_CASE("MPICH / Intel MPI (PMI) variables", "[unit]") {
  auto e = detect({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"},
                   {"MASTER_ADDR", "h1"}, {"MASTER_PORT", "1234"}});
  CHECK(e.launcher == "mpich");
  CHECK(e.rank == 2);
  CHECK(e.world_size == 3);
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 3);
  CHECK(e.master_addr == "h1");
  CHECK(e.master_port == 1234);
}

TEST_CASE("SLURM: master is the first host of the hostlist, port derived from the job id", "[unit]") {
  auto e = detect({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"}, {"SLURM_STEP_ID", "0"},
                   {"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_JOB_NODELIST", "gpu[01-04,07]"}, {"SLURM_JOB_ID", "123456"}});
  CHECK(e.launcher == "slurm");
  CHECK(e.rank == 6);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "gpu01");
  CHECK(e.master_port == 20000 + 123456 % 20000);
  // another srun step of the same job: another port (two steps met each other, or failed to listen)
  auto step2 = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "2"},
                       {"SLURM_JOB_NODELIST", "gpu01"}, {"SLURM_JOB_ID", "123456"}});
  CHECK(step2.master_port == 20000 + (123456 + 2 * 10007) % 20000);
  // the batch script of a 2-task job is no task: said, instead of waiting as rank 0 of 2
  CHECK(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "gpu01"},
                  {"SLURM_JOB_ID", "7"}}) ==
        "slurm launch: SLURM_NTASKS=2, but this process is not one of the job's tasks (no SLURM_STEP_ID: the batch "
        "script itself?). Start the ranks with `srun trainer run ...`, or with `trainer launch -n N -- run ...` from "
        "the script");
}

TEST_CASE("SLURM: explicit MASTER_ADDR and MASTER_PORT win", "[unit]") {
  auto e = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "gpu[01-02]"},
                   {"SLURM_STEPID", "0"}, {"SLURM_JOB_ID", "7"}, {"MASTER_ADDR", "ib-gpu01"}, {"MASTER_PORT", "31000"}});
  CHECK(e.master_addr == "ib-gpu01");
  CHECK(e.master_port == 31000);
}

TEST_CASE("torchrun wins over SLURM when both are present", "[unit]") {
  auto e = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  CHECK(e.launcher == "torchrun");
  CHECK(e.rank == 1);
}

TEST_CASE("hostlist expansion", "[unit]") {
  CHECK_THAT(expand_hostlist("gpu[01-04,07]"), Equals(std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}));
  CHECK_THAT(expand_hostlist("gpu[01-02],login1"), Equals(std::vector<std::string>{"gpu01", "gpu02", "login1"}));
  CHECK_THAT(expand_hostlist("n[9-11]"), Equals(std::vector<std::string>{"n9", "n10", "n11"}));
  CHECK_THAT(expand_hostlist("node[1-2]-ib"), Equals(std::vector<std::string>{"node1-ib", "node2-ib"}));
  CHECK_THAT(expand_hostlist("single"), Equals(std::vector<std::string>{"single"}));
  CHECK_THAT(expand_hostlist("a[008-010]"), Equals(std::vector<std::string>{"a008", "a009", "a010"}));
}

TEST_CASE("hostlist errors name the list and the bad part", "[unit]") {
  CHECK_THROWS_WITH(expand_hostlist("gpu[01-04"), "slurm hostlist 'gpu[01-04': unbalanced '['");
  CHECK_THROWS_WITH(expand_hostlist("gpu[5-3]"), "slurm hostlist 'gpu[5-3]': descending range '5-3'");
  CHECK_THROWS_WITH(expand_hostlist("gpu[a-b]"), "slurm hostlist 'gpu[a-b]': bad range 'a-b'");
}

TEST_CASE("contradictions and missing variables name the launcher and the variable", "[unit]") {
  CHECK(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}) ==
        "torchrun launch: RANK=2 is not below WORLD_SIZE=2");
  CHECK(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}) ==
        "torchrun launch: environment variable MASTER_ADDR is not set");
  CHECK(error_of({{"RANK", "0"}}) == "torchrun launch: environment variable WORLD_SIZE is not set");
  CHECK(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}) == "torchrun launch: RANK='x' is not a non-negative integer");
  CHECK(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}}) ==
        "torchrun launch: MASTER_PORT must be a port in 1..65535");
  CHECK(error_of({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}) ==
        "openmpi launch: OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4");
  CHECK(error_of({{"OMPI_COMM_WORLD_RANK", "1"}}) == "openmpi launch: environment variable OMPI_COMM_WORLD_SIZE is not set");
  CHECK(error_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "3"}, {"MPI_LOCALNRANKS", "2"}}) ==
        "mpich launch: local rank 3 is not below the local world size 2");
  CHECK(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "1"}}) ==
        "slurm launch: environment variable SLURM_JOB_NODELIST is not set");
  CHECK(error_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_JOB_ID", "1"}}) == "slurm launch: SLURM_PROCID=3 is not below SLURM_NTASKS=2");
}

TEST_CASE("torchrun's agent store: every rank connects as a client, keys per restart attempt", "[unit]") {
  std::map<std::string, std::string> v{{"RANK", "0"},           {"WORLD_SIZE", "2"},
                                       {"LOCAL_RANK", "0"},     {"LOCAL_WORLD_SIZE", "2"},
                                       {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto plain = detect(v);  // `trainer launch` sets no TORCHELASTIC_*: rank 0 hosts the store
  CHECK_FALSE(plain.agent_store);
  CHECK(plain.restart_count == 0);
  v["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  v["TORCHELASTIC_RESTART_COUNT"] = "2";
  auto agent = detect(v);
  CHECK(agent.agent_store);
  CHECK(agent.restart_count == 2);
  v["TORCHELASTIC_USE_AGENT_STORE"] = "False";  // dynamic rendezvous with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
  CHECK_FALSE(detect(v).agent_store);
}
