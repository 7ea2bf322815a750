// A process group over some ranks of the world: one dimension of the device mesh (dist/device_mesh.hpp)
// for one rank, or the world itself (DistContext::world_group()). Its collectives fail as
// DistContext's do (DistError naming the rank, the group, the operation, its sequence number and the
// step), watched by the same watchdog; DistContext's own collectives are its world group's, so the
// two share one implementation (group.cpp). c10d stays in group.cpp.
//
// A group spanning the whole world IS the world: it runs on the world's current process group (so it
// follows a dist.recovery in_process regroup, which rebuilds that), its rank and size are the
// world's of the moment, and its collectives take the world's sequence numbers and messages
// ("all_reduce #12 (grad bucket 1/3) at step 4", TRAINER_INJECT_KILL counts them). A subgroup
// numbers its own collectives ("dp all_reduce #3 ...") and is fixed at creation.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainer::dist {

class DistContext;
class AsyncOp;  // dist/dist_context.hpp

enum class Reduce { Sum, Max };  // no AVG: Gloo's is wrong in some versions (pytorch#162338); sum, then divide

class Group {
 public:
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const { return name_; }
  int64_t rank() const;  // this process's index in ranks()
  int64_t size() const;
  std::vector<int64_t> ranks() const;  // world ranks, ascending (the world's: 0 .. size-1)
  bool active() const { return size() > 1; }
  bool is_world() const { return world_; }  // spans the whole world (see above)
  const torch::Device& device() const;      // the context's: where the collectives' tensors live
  // True when this group built its own c10d backend (false for a group of one or of the whole world).
  bool owns_backend() const { return owns_; }
  // How many collectives this group object has run: a mesh dimension of size one must stay at 0.
  uint64_t collectives() const { return count_.load(); }

  // --- blocking ------------------------------------------------------------------------------
  // In place over the group's ranks. `t` on device(); any layout (copied when not contiguous).
  void all_reduce(torch::Tensor& t, Reduce op, const std::string& what);
  // Every rank's `t` (same shape everywhere) concatenated along `dim`, in rank order.
  torch::Tensor all_gather(const torch::Tensor& t, int64_t dim, const std::string& what);
  // The sum over ranks of `t`, cut along `dim` into size() equal chunks: this rank's chunk.
  // t.size(dim) must divide by size().
  torch::Tensor reduce_scatter(const torch::Tensor& t, int64_t dim, const std::string& what);
  // Group rank 0's `t` to every rank of the group (receivers pass the right shape and dtype; bool
  // travels as uint8). Any device: moved to device() for the collective and back.
  void broadcast(torch::Tensor& t, const std::string& what);
  // Group rank 0's parameters and buffers to every rank of the group, grouped per (dtype, device)
  // into broadcasts of at most 64 MB. BatchNorm running statistics are buffers: they start equal and
  // then stay per rank (each normalises with its own shard's statistics, as torch DDP by default).
  // `buffers_only`: the buffers alone (BatchNorm's running statistics before an evaluation)
  void broadcast_module(torch::nn::Module& m, bool buffers_only = false);

  // --- launched now, the caller waits (AsyncOp::wait throws DistError) -------------------------
  // Inactive (a group of one): nothing is launched, the ops below are their one-rank results.
  // In-place sum over the group's ranks of `t` (contiguous, on device()).
  std::shared_ptr<AsyncOp> all_reduce_sum_async(torch::Tensor t, const std::string& what);
  // c10d _reduce_scatter_base / _allgather_base, on Gloo and NCCL alike. `in` holds size() equal
  // chunks of `out`'s size: `out` becomes the sum over ranks of chunk rank() of every rank's `in`.
  // Both contiguous, on device(), one dtype.
  std::shared_ptr<AsyncOp> reduce_scatter_sum_async(torch::Tensor out, torch::Tensor in, const std::string& what);
  // `out` (size() chunks of `in`'s size) becomes every rank's `in`, in rank order. `in` must not
  // alias `out` (not every backend allows it).
  std::shared_ptr<AsyncOp> all_gather_into_async(torch::Tensor out, torch::Tensor in, const std::string& what);

  // --- point to point (pipeline parallel), launched now, the caller waits ----------------------
  // `t` (contiguous, on device()) to group rank `peer` / into `t` (its shape and dtype) from group
  // rank `peer`, with `tag`. Messages between two ranks arrive in the order they were sent. A wait
  // past dist.timeout_s is a DistError naming `what` (the pipeline action) and the peer.
  std::shared_ptr<AsyncOp> send_async(torch::Tensor t, int64_t peer, int tag, const std::string& what);
  std::shared_ptr<AsyncOp> recv_async(torch::Tensor t, int64_t peer, int tag, const std::string& what);

 private:
  friend class DistContext;
  struct Backend;  // c10d's backend (group.cpp)
  struct Op;       // what one launch needs (group.cpp)
  Group() = default;
  Op begin(const char* op, const std::string& what);  // the next collective's number and label
  std::string peer_name(int64_t peer) const;          // "group rank 1 = world rank 2"
  std::shared_ptr<AsyncOp> all_reduce_async(torch::Tensor t, Reduce op, const std::string& what);

  DistContext* ctx_ = nullptr;
  std::string name_;
  std::vector<int64_t> ranks_;  // a subgroup's (the world's are the context's of the moment)
  int64_t rank_ = 0;
  bool world_ = false;
  bool owns_ = false;
  std::atomic<uint64_t> seq_{0};    // a subgroup's sequence numbers (the world's are the context's)
  std::atomic<uint64_t> count_{0};  // collectives launched through this object
  std::unique_ptr<Backend> backend_;
};

}  // namespace trainer::dist
