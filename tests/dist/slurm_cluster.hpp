// A one-node SLURM cluster on loopback for tests: its own munged (own key and socket), slurmctld
// and slurmd, all configured in a scratch folder with free ports, so it never meets a real cluster
// or another test's. Start-up takes a few seconds. The destructor cancels every job, waits for
// them, and stops the daemons.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "test_util.hpp"

namespace trainer::test {

inline int free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class SlurmCluster {
 public:
  // nullptr with `why_not` set when it cannot run here (not root, SLURM or munge not installed,
  // a daemon that does not come up).
  static std::unique_ptr<SlurmCluster> start(const std::filesystem::path& dir, std::string* why_not) {
    if (::geteuid() != 0) {
      *why_not = "the test cluster's daemons run as root";
      return nullptr;
    }
    for (const char* bin : {"munged", "slurmctld", "slurmd", "sbatch", "scontrol"})
      if (run_shell(std::string("command -v ") + bin).exit_code != 0) {
        *why_not = std::string(bin) + " is not installed (Debian: slurm-wlm, munge; scripts/setup.sh installs them)";
        return nullptr;
      }
    std::unique_ptr<SlurmCluster> c(new SlurmCluster(dir));
    if (!c->bring_up(*why_not)) return nullptr;
    return c;
  }
  ~SlurmCluster() {
    run("scancel --full --user=root >/dev/null 2>&1");
    wait_for([&] { return run("squeue -h").output.empty(); }, 60);
    for (const char* d : {"slurmd", "slurmctld", "munged"}) run("kill $(cat " + (dir_ / (std::string(d) + ".pid")).string() + ") 2>/dev/null");
  }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // A SLURM client command against this cluster (SLURM_CONF set).
  CommandResult run(const std::string& cmd) const { return run_shell("export SLURM_CONF=" + conf_.string() + "; " + cmd); }
  // `scontrol show job ID`'s FIELD=value ("" when absent).
  std::string job_field(const std::string& id, const std::string& field) const {
    const auto out = run("scontrol show job " + id).output;
    const auto at = out.find(field + "=");
    if (at == std::string::npos) return "";
    const auto start = at + field.size() + 1;
    return out.substr(start, out.find_first_of(" \n", start) - start);
  }

 private:
  explicit SlurmCluster(std::filesystem::path dir) : dir_(std::move(dir)), conf_(dir_ / "slurm.conf") {}

  bool bring_up(std::string& why) {
    namespace fs = std::filesystem;
    for (const char* d : {"state", "spool", "log"}) fs::create_directories(dir_ / d);
    const std::string d = dir_.string();
    if (run_shell("head -c 1024 /dev/urandom > " + d + "/munge.key && chmod 400 " + d + "/munge.key").exit_code != 0 ||
        run_shell("munged --socket=" + d + "/munge.sock --key-file=" + d + "/munge.key --pid-file=" + d +
                  "/munged.pid --log-file=" + d + "/log/munged.log --seed-file=" + d + "/munge.seed -f")
                .exit_code != 0) {
      why = "munged did not start: " + read_file(dir_ / "log/munged.log");
      return false;
    }
    const std::string host = run_shell("hostname -s").output.substr(0, run_shell("hostname -s").output.find('\n'));
    // cred_expire (default 120 s) is also how long a requeued job waits before it starts again
    // (slurm.conf(5)): 20 s lets a requeue test wait for the job itself instead of a fixed time.
    write_file(conf_, "ClusterName=trainertest\nSlurmctldHost=" + host + "(127.0.0.1)\n"
               "SlurmctldPort=" + std::to_string(free_tcp_port()) + "\nSlurmdPort=" + std::to_string(free_tcp_port()) + "\n"
               "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" + d + "/munge.sock,cred_expire=20\n"
               "SlurmUser=root\nSlurmdUser=root\nStateSaveLocation=" + d + "/state\nSlurmdSpoolDir=" + d + "/spool\n"
               "SlurmctldPidFile=" + d + "/slurmctld.pid\nSlurmdPidFile=" + d + "/slurmd.pid\n"
               "SlurmctldLogFile=" + d + "/log/slurmctld.log\nSlurmdLogFile=" + d + "/log/slurmd.log\n"
               "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n"
               "SelectTypeParameters=CR_CPU\nReturnToService=2\nMpiDefault=none\nJobRequeue=1\nMinJobAge=600\n"
               "NodeName=" + host + " NodeAddr=127.0.0.1 CPUs=" + std::to_string(std::max(2u, std::thread::hardware_concurrency())) +
               " State=UNKNOWN\nPartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4\n");
    if (run_shell("slurmctld -f " + conf_.string()).exit_code != 0 || run_shell("slurmd -f " + conf_.string()).exit_code != 0) {
      why = "slurmctld/slurmd did not start: " + read_file(dir_ / "log/slurmctld.log") + read_file(dir_ / "log/slurmd.log");
      return false;
    }
    // the node registers within a few seconds (more at load 8)
    if (wait_for([&] { return run("sinfo -h -o %t").output.rfind("idle", 0) == 0; }, 120)) return true;
    why = "the node did not become idle: " + run("sinfo").output + read_file(dir_ / "log/slurmctld.log");
    return false;
  }

  std::filesystem::path dir_, conf_;
};

}  // namespace trainer::test
