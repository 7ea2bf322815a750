// The rendezvous: the store every rank meets at (TCPStore at MASTER_ADDR:MASTER_PORT, or a file) and
// what the ranks agree on there before a process group connects them. See rendezvous.hpp.
#include "dist/rendezvous.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>

#include "dist/dist_impl.hpp"
#include "dist/stop_aware_store.hpp"

namespace trainer::dist {
namespace {

using Millis = std::chrono::milliseconds;

// The store's listening socket, bound to the loopback interface only: a single-node job has no
// reason to accept connections from the network. Multi-node jobs let TCPStore bind every interface.
int listen_on_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw DistError("rendezvous: socket(): " + std::string(std::strerror(errno)));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 128) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    throw DistError("rendezvous: cannot listen on 127.0.0.1:" + std::to_string(port) + ": " + why +
                    " (is MASTER_PORT used by another job?)");
  }
  return fd;
}


const std::string kFileScheme = "file://";

}  // namespace

bool is_file_store(const config::DistConfig& cfg) { return cfg.store.rfind(kFileScheme, 0) == 0; }

// The prefix of every key this attempt of this job puts in the store. A TCPStore lives as long as
// its job, so the restart count is enough there (torchrun's agent keeps one store over restarts);
// a file outlives a crashed job, so its keys are also named by the job's identity.
std::string key_namespace(const LaunchEnv& env, const config::DistConfig& cfg) {
  std::string ns = "trainer/";
  if (is_file_store(cfg)) ns += "job[" + env.job_id + "]/";
  return ns + "attempt_" + std::to_string(env.restart_count) + "/";
}

namespace {

// "host H, pid P": this process, as a store entry names it to the others.
std::string this_process() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return "host " + std::string(host) + ", pid " + std::to_string(::getpid());
}

// Each rank signs in to a file store under its rank. Finding its own entry already there means the
// file holds a job that did not finish with the same identity: its rendezvous keys (Gloo addresses
// of dead processes) would be read as this job's, so stop here and say which file to delete.
void sign_in(c10d::Store& store, const LaunchEnv& env, const config::DistConfig& cfg, const std::string& path) {
  const std::string key = key_namespace(env, cfg) + "member/" + std::to_string(env.rank);
  if (store.check({key})) {
    const auto v = store.get(key);
    throw DistError("dist.store " + cfg.store + ": rank " + std::to_string(env.rank) +
                    " of this job is already registered in it (" + std::string(v.begin(), v.end()) +
                    "): the file was left by an earlier job that did not finish (crashed or killed) and was "
                    "started the same way (" + (env.job_id.empty() ? "no job id from the launcher" : env.job_id) +
                    "); delete " + path + " (no job may be using it) and start again");
  }
  const std::string who = this_process() + ", unix time " + std::to_string(std::time(nullptr));
  store.set(key, std::vector<uint8_t>(who.begin(), who.end()));
}

// One client connection, made on a thread of its own: TCPStore's constructor pings the host and waits for
// the answer with no time-out, so a host that accepts and never answers (a stopped launcher, another
// program on the port) held the rank past dist.timeout_s and through SIGTERM (found from outside,
// 2026-12-07). The thread owns all it touches, so one left blocked touches nothing freed while the
// process ends.
std::future<c10::intrusive_ptr<c10d::TCPStore>> connect_in_background(const std::string& host,
                                                                      const c10d::TCPStoreOptions& opts) {
  auto connect = std::make_shared<std::packaged_task<c10::intrusive_ptr<c10d::TCPStore>()>>(
      [host, opts] { return c10::make_intrusive<c10d::TCPStore>(host, opts); });
  auto connected = connect->get_future();
  std::thread([connect] { (*connect)(); }).detach();
  return connected;
}

// In the process group's store (beside Gloo's keys): rank 0's config hash, which the others check.
const std::string kConfigHashKey = "trainer_config_hash";

// This host's IPv4 addresses but loopback, sorted: two ranks with the same list share a network stack.
std::string host_addresses() {
  std::vector<std::string> a;
  for (const auto& [iface, addr] : ipv4_interfaces())
    if (!is_loopback(addr)) a.push_back(addr);
  std::sort(a.begin(), a.end());
  std::string out;
  for (const auto& x : a) out += (out.empty() ? "" : " ") + x;
  return out.empty() ? "(none)" : out;
}

// A rank that advertises a loopback address is reachable from its own host only: with a rank on another
// host (other addresses) Gloo's connect timed out at 5x dist.timeout_s naming nothing (found from
// outside: GLOO_SOCKET_IFNAME=lo, or --master-addr 127.0.0.1 on node 0). Every rank leaves its host's
// addresses; one on loopback in a job known to span hosts compares them with every other rank's.
std::string loopback_across_hosts(c10d::Store& meeting, const LaunchEnv& env, const NetChoice& net) {
  const std::string mine = host_addresses();
  meeting.set("trainer_host/" + std::to_string(env.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  if (!is_loopback(net.address) || env.local_world_size >= env.world_size) return "";
  for (int64_t r = 0; r < env.world_size; ++r) {
    if (r == env.rank) continue;
    const auto v = meeting.get("trainer_host/" + std::to_string(r));
    if (const std::string theirs(v.begin(), v.end()); theirs != mine)
      return "rank " + std::to_string(env.rank) + " advertises the loopback address " + describe(net) + ", but rank " +
             std::to_string(r) + " runs on another host (its addresses: " + theirs + "; this host's: " + mine +
             "), which cannot reach it. Set dist.interface (or GLOO_SOCKET_IFNAME) to the interface of the network "
             "the nodes share, and give node 0's address to --master-addr; this host has: " + known_interfaces();
  }
  return "";
}

}  // namespace

// Ranks started by hand (or by launchers on several hosts) with different world sizes met in the process
// group's rendezvous and waited out dist.timeout_s there (rank 0 of a 2-rank view waited 5x as long,
// in Gloo's pairs), each saying only that a rank did not come; so did a rank started twice (two nodes
// given the same --node-rank). The first rank at the store records its world size, and each rank its
// number; a rank that finds another size, or its number taken, says so and calls the meeting off in
// `meeting` (the process group's store: its waits read kMeetingOffKey).
void agree_on_membership(c10d::Store& store, const LaunchEnv& env, const std::string& ns, c10d::Store& meeting,
                         bool hosts_store, const std::string& config_hash, const NetChoice& net) {
  auto bytes = [](const std::string& t) { return std::vector<uint8_t>(t.begin(), t.end()); };
  auto call_off = [&](const std::string& why) {
    meeting.set(kMeetingOffKey, bytes(why));
    // the store ends with its host: give the rank that came first a moment to read why
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (hosts_store && meeting.add(kMeetingOffReadKey, 0) == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(Millis(20));
    throw DistError("rank " + std::to_string(env.rank) + ": " + why);
  };
  // "<size>@<rank>": the message names the rank that came first by its number (found from outside: "a
  // rank before it" read as a lower rank, which rank 0 cannot have)
  const std::string mine = std::to_string(env.world_size);
  const auto first = store.compareSet(ns + "world_size", {}, bytes(mine + "@" + std::to_string(env.rank)));
  const std::string theirs_entry(first.begin(), first.end());
  const auto at = theirs_entry.find('@');
  const std::string theirs = theirs_entry.substr(0, at);
  const std::string first_rank = at == std::string::npos ? "a rank" : "rank " + theirs_entry.substr(at + 1);
  const std::string& var = env.world_size_var;
  if (theirs != mine)
    call_off("the ranks of this job were started with different world sizes: rank " + std::to_string(env.rank) +
             " with " + var + "=" + mine + ", " + first_rank + " (at the store first) with " + var + "=" + theirs +
             "; start every rank with the same " + var + " (or is another job using the same rendezvous address?)");
  const std::string me = this_process();
  const auto holder = store.compareSet(ns + "rank/" + std::to_string(env.rank), {}, bytes(me));
  if (std::string(holder.begin(), holder.end()) != me)
    call_off("rank " + std::to_string(env.rank) + " was started twice: by " +
             std::string(holder.begin(), holder.end()) + " and by " + me +
             "; give every node its own --node-rank (every process its own rank), or is another job using the same "
             "rendezvous address?");
  if (const auto why = loopback_across_hosts(meeting, env, net); !why.empty()) call_off(why);
  // the config, before the process group connects anyone (a node that found another job's store joined
  // its Gloo mesh, then timed out in a collective): rank 0's, which the others wait for
  if (env.rank == 0) return meeting.set(kConfigHashKey, bytes(config_hash));
  const auto root = meeting.get(kConfigHashKey);
  if (const std::string r0(root.begin(), root.end()); r0 != config_hash)
    call_off("config hash mismatch: rank 0 has " + r0 + ", rank " + std::to_string(env.rank) + " has " + config_hash +
             "; every rank must run the same config (same file and --set overrides), or is another job using the "
             "same rendezvous address?");
}

c10::intrusive_ptr<c10d::Store> make_store(const LaunchEnv& env, const config::DistConfig& cfg, Millis timeout) {
  if (is_file_store(cfg)) {
    std::string path = cfg.store.substr(kFileScheme.size());
    if (path.empty() || path[0] != '/')
      throw DistError("dist.store '" + cfg.store + "': expected file:///absolute/path on a shared file system");
    try {
      auto fs = c10::make_intrusive<c10d::FileStore>(path, static_cast<int>(env.world_size));
      fs->setTimeout(timeout);
      sign_in(*fs, env, cfg, path);
      return fs;
    } catch (const DistError&) {
      throw;
    } catch (const std::exception& e) {
      throw DistError("rank " + std::to_string(env.rank) + ": dist.store " + cfg.store + ": " + error_text(e));
    }
  }
  if (!cfg.store.empty())
    throw DistError("dist.store '" + cfg.store + "': expected \"\" (TCPStore at MASTER_ADDR:MASTER_PORT) or file:///path");
  if (env.master_addr.empty() || env.master_port == 0)
    throw DistError(env.launcher + " launch with " + std::to_string(env.world_size) +
                    " ranks: no rendezvous address; set MASTER_ADDR and MASTER_PORT, or dist.store: file:///shared/path");
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env.master_port);
  // rank 0 hosts the store and the others connect, unless torchrun's agent already hosts it
  o.isServer = env.rank == 0 && !env.agent_store;
  o.numWorkers = static_cast<size_t>(env.world_size);
  // the server does not wait for its clients here, deaf to a stop signal: the process group's meeting
  // waits for every rank, through StopAwareStore
  o.waitWorkers = false;
  o.timeout = timeout;
  if (o.isServer && is_loopback(env.master_addr)) o.masterListenFd = listen_on_loopback(env.master_port);
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  auto failed = [&](const std::exception& e) {
    return DistError("rank " + std::to_string(env.rank) + ": rendezvous at " + where + " failed: " + error_text(e));
  };
  if (o.isServer) {
    try {
      return c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    } catch (const std::exception& e) {
      throw failed(e);
    }
  }
  // a client connects in slices of 0.5 s: the store's own retries would wait the whole timeout through a
  // stop signal (a rank whose store host never came)
  const auto start = std::chrono::steady_clock::now();
  auto past_timeout = [&] { return std::chrono::steady_clock::now() - start >= timeout; };
  StopGrace grace;
  for (;;) {
    if (const auto why = tcp_unreachable(env.master_addr, env.master_port, Millis(500)); !why.empty()) {
      grace.check("the store at " + where);
      if (past_timeout())
        throw DistError("rank " + std::to_string(env.rank) + ": rendezvous at " + where + " failed: " + why +
                        ", for dist.timeout_s; is node 0's launcher (or rank 0) running, and is " + env.master_addr +
                        " its address?" + (env.launcher != "torchrun" ? std::string() :
                        " (this process is rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                        " by the variables RANK and WORLD_SIZE: left over in this shell from another job? unset them "
                        "to run one process)"));
      std::this_thread::sleep_for(Millis(100));  // a refusal comes at once
      continue;
    }
    auto attempt = o;
    attempt.timeout = std::min(timeout, Millis(500));
    auto connecting = connect_in_background(env.master_addr, attempt);
    while (connecting.wait_for(Millis(100)) != std::future_status::ready) {
      grace.check("the store at " + where);
      if (!past_timeout()) continue;
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", static_cast<double>(timeout.count()) / 1000.0);
      throw DistError("rank " + std::to_string(env.rank) + ": rendezvous at " + where +
                      ": the host accepted the connection but did not answer within dist.timeout_s (" + secs +
                      " s); is rank 0 (or the launcher hosting the store) stopped, or another program listening on "
                      "that port?");
    }
    try {
      auto store = connecting.get();
      store->setTimeout(timeout);
      return store;
    } catch (const std::exception& e) {
      grace.check("the store at " + where);
      if (past_timeout()) throw failed(e);
    }
  }
}

}  // namespace trainer::dist
