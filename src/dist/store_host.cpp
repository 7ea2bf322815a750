// StoreHost: a c10d TCPStore served from the launcher process. See store_host.hpp.
#include "dist/store_host.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "dist/launch_env.hpp"
#include "dist/net_iface.hpp"

namespace trainer::dist {

struct StoreHost::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

namespace {

// Our own listening socket (close-on-exec: the ranks the launcher forks must not inherit it).
int listen_socket(int port, bool loopback_only) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("launch: socket(): " + std::string(std::strerror(errno)));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 512) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("launch: cannot host the rendezvous store on " +
                             std::string(loopback_only ? "127.0.0.1" : "0.0.0.0") + ":" + std::to_string(port) +
                             ": " + why + " (is the port used by another job? choose another with --master-port)");
  }
  return fd;
}

}  // namespace

StoreHost::StoreHost() : impl_(std::make_unique<Impl>()) {}
StoreHost::~StoreHost() = default;

std::unique_ptr<StoreHost> StoreHost::listen(int port, bool loopback_only) {
  std::unique_ptr<StoreHost> h(new StoreHost());
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = true;
  o.waitWorkers = false;
  o.masterListenFd = listen_socket(port, loopback_only);
  try {
    h->impl_->store = c10::make_intrusive<c10d::TCPStore>(loopback_only ? "127.0.0.1" : "localhost", o);
  } catch (const std::exception& e) {
    throw std::runtime_error("launch: cannot host the rendezvous store on port " + std::to_string(port) + ": " +
                             e.what());
  }
  return h;
}

std::unique_ptr<StoreHost> StoreHost::connect(const std::string& addr, int port, double timeout_s) {
  // probed first: a store that is gone gave c10d's retries, with a stack trace each, for timeout_s
  if (!tcp_unreachable(addr, port, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))).empty())
    return nullptr;
  std::unique_ptr<StoreHost> h(new StoreHost());
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  try {
    h->impl_->store = c10::make_intrusive<c10d::TCPStore>(addr, o);
  } catch (const std::exception&) {
    return nullptr;
  }
  return h;
}

std::optional<std::string> StoreHost::get(const std::string& key) {
  if (!impl_->store->check({key})) return std::nullopt;
  auto v = impl_->store->get(key);
  return std::string(v.begin(), v.end());
}

void StoreHost::set(const std::string& key, const std::string& value) {
  impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

// Another node's link to node 0's store, shared with the thread that queries it: a thread left blocked
// keeps it alive.
struct RankStore::Client {
  std::string addr;
  int port = 0;
  bool tried = false;
  std::unique_ptr<StoreHost> host;
  std::mutex mu;  // one query at a time
};

namespace {
// c10d's client waits in recv() without a limit when node 0's launcher is frozen (SIGSTOP, a hung host:
// its kernel still accepts the connection): node 1's launcher never ended, deaf to SIGTERM (found from
// outside). Each query of another node runs on a thread of its own, waited for this long.
constexpr double kQueryLimitS = 10;
}  // namespace

RankStore::RankStore(const std::string& addr, int port, int nnodes, int node_rank, int nprocs)
    : nnodes_(nnodes), node_rank_(node_rank), nprocs_(nprocs) {
  if (nnodes * nprocs <= 1) return;
  if (node_rank == 0) {
    host_ = StoreHost::listen(port, nnodes == 1 && is_loopback(addr));
  } else {
    client_ = std::make_shared<Client>();
    client_->addr = addr;
    client_->port = port;
  }
}

bool RankStore::with_store(const std::function<void(StoreHost&)>& fn) {
  if (host_) {  // node 0: the store is served by this process
    try {
      fn(*host_);
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }
  if (!client_ || gone_) return false;
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false, ok = false;
  };
  auto out = std::make_shared<Outcome>();
  std::thread([client = client_, out, fn] {
    bool ok = false;
    {
      std::lock_guard<std::mutex> lock(client->mu);
      try {
        if (!client->tried) {
          client->tried = true;
          client->host = StoreHost::connect(client->addr, client->port, 5.0);
        }
        if (client->host) {
          fn(*client->host);
          ok = true;
        }
      } catch (const std::exception&) {
      }
    }
    std::lock_guard<std::mutex> lock(out->mu);
    out->done = true;
    out->ok = ok;
    out->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(out->mu);
  if (!out->cv.wait_for(lock, std::chrono::duration<double>(kQueryLimitS), [&] { return out->done; })) {
    gone_ = true;  // the thread stays blocked with its own references; the launcher goes on without a store
    return false;
  }
  return out->ok;
}

bool RankStore::in_process(int attempt) {
  // every rank built what it trains (DistContext::arm_recovery adds 1): before, there is no group to go on
  auto yes = std::make_shared<bool>(false);
  const std::string prefix = recovery_prefix(attempt);
  const int64_t world = static_cast<int64_t>(nnodes_) * nprocs_;
  if (!with_store([yes, prefix, world](StoreHost& s) {
        *yes = s.get(prefix + "mode").value_or("") == "in_process" &&
               std::stoll(s.get(prefix + "armed").value_or("0")) >= world;
      }))
    return false;
  return *yes;
}

void RankStore::mark_dead(int attempt, int rank, int incarnation) {
  // not marked: the survivors count it lost after dist.timeout_s
  const std::string key = recovery_prefix(attempt) + "dead/" + std::to_string(rank);
  with_store([key, incarnation](StoreHost& s) {
    s.set(key + "@" + std::to_string(incarnation), "exited");
    s.set(key, "exited");
  });
}

std::string recovery_prefix(int attempt) { return "trainer/attempt_" + std::to_string(attempt) + "/recovery/"; }

}  // namespace trainer::dist
