// Simulated hosts for multi-node tests: Linux network namespaces, each with loopback and one veth
// ("eth0", 10.213.0.<k+1>/24), whose peers sit on a bridge in a namespace of their own. Nothing
// touches the machine's own network namespace: every link is created directly inside the test's
// namespaces, and the addresses exist only there. Optional bandwidth limit per host (tc tbf;
// netem is not available here). The destructor deletes every namespace it made (their veths go
// with them), also when the test fails; namespaces left by a killed test process are removed the
// next time a HostNet is created.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace trainer::test {

class HostNet {
 public:
  // `hosts` namespaces named trn<pid><tag>h<k>, or nullptr with `why_not` set (not root, no `ip`,
  // namespaces refused): the caller skips with that reason.
  static std::unique_ptr<HostNet> create(int hosts, const std::string& tag, std::string* why_not) {
    if (::geteuid() != 0) {
      *why_not = "network namespaces need root";
      return nullptr;
    }
    if (run_shell("command -v ip").exit_code != 0) {
      *why_not = "no `ip` command (iproute2)";
      return nullptr;
    }
    remove_stale();
    std::unique_ptr<HostNet> net(new HostNet);
    net->prefix_ = "trn" + std::to_string(::getpid()) + tag;
    std::string err;
    if (!net->build(hosts, err)) {
      *why_not = "could not create network namespaces: " + err;
      return nullptr;  // the destructor removes what was made
    }
    return net;
  }
  ~HostNet() {
    for (const auto& ns : made_) {
      run_shell("ip netns del " + ns + " 2>/dev/null");
      std::error_code ec;
      std::filesystem::remove_all("/etc/netns/" + ns, ec);
    }
  }
  HostNet(const HostNet&) = delete;
  HostNet& operator=(const HostNet&) = delete;

  std::string ns(int host) const { return prefix_ + "h" + std::to_string(host); }
  static std::string addr(int host) { return "10.213.0." + std::to_string(host + 1); }
  // Each host's name is its namespace's: `ip netns exec` shows every host an /etc/hosts
  // (/etc/netns/<ns>/hosts) naming all of them, so launchers that take host names (mpirun --host)
  // resolve them; a name resolving to one of the host's own addresses is "this host".
  // A shell prefix that runs the rest of the line inside `host`: its network namespace, and a UTS
  // namespace whose host name is the namespace's (torchrun's c10d rendezvous advertises the host
  // name, which must resolve to the host's own address, not to a name every host shares).
  std::string exec(int host) const {
    return "ip netns exec " + ns(host) + " unshare --uts -- sh -c 'hostname \"$0\" && exec \"$@\"' " + ns(host) + " ";
  }
  // Kills every process of `host` at once (SIGKILL): the host dies.
  void kill_host(int host) const { run_shell("ip netns pids " + ns(host) + " | xargs -r kill -9"); }
  // Caps the host's outgoing rate (tc tbf), e.g. "200mbit". Returns false with the error text.
  bool limit(int host, const std::string& rate, std::string* err) const {
    auto r = run_shell(exec(host) + "tc qdisc replace dev eth0 root tbf rate " + rate + " burst 64kb latency 100ms");
    if (r.exit_code != 0) *err = r.output;
    return r.exit_code == 0;
  }
  // Takes the host's link down (or up again): its peers see it vanish as a dead link would.
  bool set_link(int host, bool up) const {
    return run_shell("ip -n " + ns(host) + " link set eth0 " + (up ? "up" : "down")).exit_code == 0;
  }

 private:
  HostNet() = default;

  bool sh(const std::string& cmd, std::string& err) {
    auto r = run_shell(cmd);
    if (r.exit_code != 0) err = cmd + ": " + r.output;
    return r.exit_code == 0;
  }
  bool add_ns(const std::string& name, std::string& err) {
    if (!sh("ip netns add " + name, err)) return false;
    made_.push_back(name);
    return sh("ip -n " + name + " link set lo up", err);
  }
  bool build(int hosts, std::string& err) {
    const std::string bridge = prefix_ + "br";
    if (!add_ns(bridge, err) || !sh("ip -n " + bridge + " link add br0 type bridge", err) ||
        !sh("ip -n " + bridge + " link set br0 up", err))
      return false;
    for (int h = 0; h < hosts; ++h) {
      const std::string host = ns(h);
      std::string peer = "p";  // appended, not "p" + std::to_string(h): GCC 12's -Wrestrict false positive (bug 105329)
      peer += std::to_string(h);
      if (!add_ns(host, err) ||
          !sh("ip -n " + host + " link add eth0 type veth peer name " + peer + " netns " + bridge, err) ||
          !sh("ip -n " + bridge + " link set " + peer + " master br0 up", err) ||
          !sh("ip -n " + host + " addr add " + addr(h) + "/24 dev eth0", err) ||
          !sh("ip -n " + host + " link set eth0 up", err))
        return false;
    }
    std::string hosts_file = "127.0.0.1 localhost\n";
    for (int h = 0; h < hosts; ++h) hosts_file += addr(h) + " " + ns(h) + "\n";
    for (int h = 0; h < hosts; ++h) {
      std::error_code ec;
      std::filesystem::create_directories("/etc/netns/" + ns(h), ec);
      write_file("/etc/netns/" + ns(h) + "/hosts", hosts_file);
      if (ec) {
        err = "cannot create /etc/netns/" + ns(h) + ": " + ec.message();
        return false;
      }
    }
    return true;
  }
  // trn<pid>...: namespaces of test processes that no longer run
  static void remove_stale() {
    std::istringstream in(run_shell("ip netns list 2>/dev/null").output);
    for (std::string line; std::getline(in, line);) {
      const std::string name = line.substr(0, line.find(' '));
      if (name.rfind("trn", 0) != 0) continue;
      size_t end = 3;
      while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
      if (end == 3) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(name.substr(3, end - 3)));
      if (::kill(pid, 0) != 0 && errno == ESRCH) {
        run_shell("ip netns del " + name + " 2>/dev/null");
        std::error_code ec;
        std::filesystem::remove_all("/etc/netns/" + name, ec);
      }
    }
  }

  std::string prefix_;
  std::vector<std::string> made_;
};

}  // namespace trainer::test
