// The rendezvous store `trainer launch` hosts for its ranks (node 0's launcher; the ranks connect as
// clients, as under torchrun's agent). Hosted by the launcher it outlives every rank, which is what
// dist.recovery in_process needs; the launcher also reads and writes a few keys of its own there.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace trainer::dist {

class StoreHost {
 public:
  // Listens on `port`: on 127.0.0.1 only when `loopback_only` (a job on one node), else on every
  // interface. Throws std::runtime_error naming the port when it cannot listen.
  static std::unique_ptr<StoreHost> listen(int port, bool loopback_only);
  // A client of the store another node's launcher hosts; nullptr when it cannot be reached within
  // `timeout_s` (the launcher then behaves as without a store).
  static std::unique_ptr<StoreHost> connect(const std::string& addr, int port, double timeout_s);
  ~StoreHost();
  StoreHost(const StoreHost&) = delete;
  StoreHost& operator=(const StoreHost&) = delete;

  std::optional<std::string> get(const std::string& key);  // nullopt when the key is not there
  void set(const std::string& key, const std::string& value);

 private:
  StoreHost();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The launcher's view of the rendezvous store: node 0 hosts it (StoreHost::listen), another node
// connects to it only when a rank of its own ended and it must know whether the job recovers in
// process. Without a store (one rank, a dist.store file) nothing is in process.
class RankStore {
 public:
  // `addr`, `port`: the job's store (node 0's address); nnodes, node_rank, nprocs: the launch's
  RankStore(const std::string& addr, int port, int nnodes, int node_rank, int nprocs);
  // the attempt's ranks recover in process (dist.recovery in_process) and every one of them is armed
  // (built what it trains: DistContext::arm_recovery); a rank lost before fails the attempt's group
  bool in_process(int attempt);
  // `incarnation`: which process of the rank ended (0: the first, n: its n-th replacement), so that a
  // replacement that died before the group admitted it is not admitted (dist_regroup.cpp)
  void mark_dead(int attempt, int rank, int incarnation);

 private:
  struct Client;  // another node's connection (store_host.cpp)
  // Runs `fn` on the store within kQueryLimitS; false when there is no store, it cannot be reached, `fn`
  // threw, or it did not answer in time (never asked again then).
  bool with_store(const std::function<void(StoreHost&)>& fn);
  int nnodes_, node_rank_, nprocs_;
  std::unique_ptr<StoreHost> host_;  // node 0's: the store itself, in this process
  std::shared_ptr<Client> client_;   // the other nodes'
  bool gone_ = false;                // a query timed out: node 0's launcher is frozen or its host hung
};

// The store prefix of attempt `attempt`'s dist.recovery keys (dist_impl.hpp's RecoveryState).
std::string recovery_prefix(int attempt);

}  // namespace trainer::dist
