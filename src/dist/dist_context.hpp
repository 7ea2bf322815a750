// One process's membership in the distributed job: rendezvous store, process group (Gloo or NCCL),
// and the few collectives the trainer needs. c10d and gloo types stay in dist_context.cpp so that
// no other file of the project sees gloo's or c10d's headers.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "dist/launch_env.hpp"
#include "dist/net_iface.hpp"

namespace trainer::dist {

// A collective failed, timed out or found the ranks disagreeing. The message names this rank, the
// training step, the operation and its sequence number, e.g.
// "rank 0: all_reduce #12 (grad bucket 1/3) at step 4 failed: ... Connection closed by peer".
class DistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective launched without waiting for it. wait() throws DistError.
class AsyncOp {
 public:
  virtual ~AsyncOp() = default;
  virtual void wait() = 0;
};

// How long after dist.timeout_s the watchdog gives up on a wait the backend itself did not end:
// it then prints the same message a DistError would carry and ends the process with exit code 1.
inline constexpr double kWatchdogMarginS = 15.0;

class Group;  // dist/group.hpp

class DistContext {  // one per process; inactive (all no-ops) when world_size == 1
 public:
  // Rendezvous, process group, then the config-hash agreement (DistError on a mismatch, on every
  // rank, naming both hashes). Backend "auto" is NCCL when `device` is CUDA, else Gloo.
  static std::unique_ptr<DistContext> create(const LaunchEnv& env, const config::DistConfig& cfg,
                                             const torch::Device& device, const std::string& config_hash);
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  bool active() const { return world_size_ > 1; }
  int64_t rank() const { return rank_; }
  int64_t world_size() const { return world_size_; }
  int64_t local_rank() const { return local_rank_; }
  const torch::Device& device() const { return device_; }
  std::string backend_name() const;  // "gloo" | "nccl" | "none"
  double timeout_s() const { return timeout_s_; }
  // The interface and address this rank's collectives use (dist/net_iface.hpp); empty when inactive.
  const NetChoice& net() const { return net_; }

  // How the watchdog learns that a stop signal arrived: `asked` returns its name ("SIGTERM"), or ""
  // when none; it is called from the watchdog's thread, so it may only read atomics. When a stop is
  // asked while a wait has stalled on its peers for 5 s, the rank says once why it does not stop yet.
  void set_stop_query(std::function<std::string()> asked);

  // The training step named in failure messages; the trainer sets it at each step boundary.
  void set_step(int64_t step) { step_.store(step); }
  int64_t step() const { return step_.load(); }
  // Sequence number the next collective will get (the same on every rank when they agree).
  uint64_t next_seq() const { return seq_.load(); }

  // The world as a dist::Group (dist/group.hpp): what the data-parallel strategies run over when
  // there is no device mesh. It follows a regroup (the rebuilt backend, the new rank and size).
  // The world's collectives below are this group's.
  Group& world_group() { return *world_group_; }

  // Rank 0's parameters and buffers to every rank: world_group().broadcast_module.
  void broadcast_module(torch::nn::Module& m);
  double all_reduce_mean(double v);  // for logging (loss), and any-flag agreement
  bool any(bool flag);               // true if any rank says true (stop flags)
  void barrier();

  // Every rank's copy of `t` (same shape and dtype everywhere), stacked on a new leading dim.
  torch::Tensor all_gather(const torch::Tensor& t, const std::string& what);
  // world_group()'s (group.hpp says what each does): in-place sum over ranks, launched now (the
  // caller waits), and the sharded strategies' reduce-scatter and all-gather over world_size() chunks.
  std::shared_ptr<AsyncOp> all_reduce_sum_async(torch::Tensor t, const std::string& what);
  std::shared_ptr<AsyncOp> reduce_scatter_sum_async(torch::Tensor out, torch::Tensor in, const std::string& what);
  std::shared_ptr<AsyncOp> all_gather_into_async(torch::Tensor out, torch::Tensor in, const std::string& what);

  // A process group of the world ranks `ranks` (ascending, this rank among them) for a mesh
  // dimension (dist/group.cpp). Every rank of `ranks` must ask for it with the same ranks and name.
  // One rank: no backend, every collective returns its input. All ranks of the world: the world's
  // own backend. Otherwise a new c10d subgroup of the world's backend kind.
  std::unique_ptr<Group> new_group(const std::vector<int64_t>& ranks, const std::string& name);

  // --- dist.recovery in_process (dist_regroup.cpp) ---------------------------------------------
  // Members are named by the RANK the launcher gave them at start; rank() and world_size() change
  // when the job regroups, the member id does not.
  bool recovery() const;
  int64_t member_id() const;
  // The commit vote between a step's gradient sync and its optimizer step: returns when every member
  // finished the sync (all then step), throws DistError when a peer failed first (none steps: the
  // step is abandoned). Without in_process recovery: nothing.
  void commit_step(int64_t step);
  // After a DistError: tells the others, agrees through the store (which the launcher hosts, so it
  // outlives any rank) on who survived, and builds a new process group of the survivors, renumbered
  // in member order. `committed_steps`: the optimizer steps this rank has taken (every survivor must
  // have taken the same). Throws DistError when this rank was left out or the survivors disagree.
  struct Regrouped {
    int64_t old_rank = 0, old_world = 0, rank = 0, world = 0, generation = 0;
    std::vector<int64_t> lost;  // member ids that did not check in
  };
  Regrouped regroup(int64_t committed_steps, const std::string& why);

  // Growing back. A replacement rank (LaunchEnv::join_incarnation) starts as a world of one with no
  // process group; join() then announces it and waits until the group admits it (at one of the
  // group's step boundaries), and makes it a member of the new generation.
  // nullopt: the group finished (mark_finished) or `give_up` said so (a stop signal) before it
  // admitted this rank.
  bool joining() const { return joining_; }
  std::optional<Regrouped> join(const std::function<bool()>& give_up);
  void mark_finished();  // the run is over: a replacement still waiting to join ends too
  // Rank 0 (any rank may call it; only rank 0 acts): when replacements wait, proposes the next
  // generation with them and returns true. The members then agree on it (an any-flag) and grow().
  bool propose_growth();
  Regrouped grow();  // every member of the group: the new generation's process group
  // Rank 0's `text` / tensor to every rank (receivers pass a tensor of the right shape and dtype;
  // the tensor: world_group().broadcast).
  std::string broadcast_text(const std::string& text, const std::string& what);
  void broadcast_tensor(torch::Tensor& t, const std::string& what);
  // Several any() flags in one all-reduce.
  std::vector<bool> any_of(const std::vector<bool>& flags);
  // The first non-empty `mine` of the ranks (in rank order), on every rank: what one rank found
  // when the ranks agreed that some rank found something (a changed data file). One all-gather.
  std::string first_text(const std::string& mine, const std::string& what);

  // A rank that ends the job on its own, between collectives its peers may already wait in (a data
  // file changed under a step it cannot finish), leaves why in the store first: a peer whose
  // collective then fails reads it (peer_note) and says why instead of "a peer was lost". Keyed by
  // rank; nothing when inactive. peer_note: the first note another rank left, "" when none or when
  // the store cannot be read within 5 s (rank 0 hosted it and is gone, or hangs).
  void leave_note(const std::string& text);
  std::string peer_note();

  // Whether every rank holds the same `mine` for `key`, through the store, not a collective (no
  // sequence number is taken): each rank leaves its own; rank 0 compares every other rank's with its
  // own, the others compare rank 0's (each waits up to the store's time-out). The first rank found
  // to differ and its text, or nullopt (also when inactive).
  std::optional<std::pair<int64_t, std::string>> differing_rank(const std::string& key, const std::string& mine);

  // TRAINER_INJECT_KILL at an engine moment (tests and drills of dist.recovery in_process):
  // RANK:save:STEP (the checkpoint of STEP written but its manifest, i.e. mid-save), RANK:eval:STEP
  // (as the evaluation after STEP starts), RANK:share:N (rank 0 sending its state to a replacement,
  // the N-th time, mid-transfer), RANK:grow:N (the N-th growth agreed, before the grown group
  // checks in), RANK:start:N (the N-th look for the checkpoint to start from, between rank 0's scan
  // of the folder and the others'), RANK:setup:ATTEMPT (as the model is built, in restart attempt
  // ATTEMPT only). This process SIGKILLs itself when it reaches `moment` with `n`,
  // once; otherwise nothing.
  void kill_point(const std::string& moment, int64_t n);

  // dist.recovery in_process: this rank has built what it trains (the model, the data, the strategy).
  // A launcher replaces a lost rank in process only once every rank of the attempt said so: a rank
  // lost before is a failure of the attempt's group, which --max-restarts starts again (a replacement
  // had no group to join, and used up the restart). Without in_process recovery: nothing.
  void arm_recovery();

  struct Impl;  // c10d store + backend + watchdog (dist_context.cpp)

 private:
  friend class Group;  // the world group numbers its collectives with seq_
  DistContext() = default;
  std::unique_ptr<Group> world_view(const std::string& name);  // a Group that is the world (group.cpp)
  void check_config_hash(const std::string& config_hash);
  void start_recovery(const LaunchEnv& env, const std::string& prefix);
  void read_kill_injection();  // TRAINER_INJECT_KILL (dist_regroup.cpp)
  void new_process_group(const std::vector<int64_t>& members);  // the generation's, this rank among them
  bool meet_grown(const std::vector<int64_t>& next);  // the grown generation's members all check in first

  int64_t rank_ = 0, world_size_ = 1, local_rank_ = 0;
  bool joining_ = false;
  int64_t join_incarnation_ = 0;
  torch::Device device_{torch::kCPU};
  double timeout_s_ = 300.0;
  NetChoice net_;
  std::atomic<int64_t> step_{0};
  std::atomic<uint64_t> seq_{0};
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<Group> world_group_;  // after impl_: destroyed before it
};

}  // namespace trainer::dist
