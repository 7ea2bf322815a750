// The flat, padded, bucketed parameter and gradient buffers of the sharded strategies
// (dist.sharding optimizer | gradients), and the collectives that keep them in step.
//
// The ranks are those of one dist::Group (group.hpp): the world, or the device mesh's dp group, whose
// ranks hold the same (TP-local) parameters; "rank" and N below are the group's rank and size.
//
// Layout (identical on every rank of the group, checked once like GradSync's): the trainable
// parameters in reverse registration order (roughly the order backward produces their gradients)
// are packed into buckets of about dist.bucket_mb, one dtype and device per bucket. Each bucket is
// padded with zeros to a multiple of the group size N and cut into N equal chunks: rank r owns chunk
// r of every bucket.
// The parameters become views into their bucket's buffer (in their own memory format), so the
// all-gather after the optimizer step writes the model's weights in place. What a rank owns of a
// parameter is a "piece": a contiguous range of the parameter's elements in storage order; the
// optimizer steps the pieces (1-D views into the owned chunk), never the parameters themselves.
//
// Gradients: the post-accumulate-grad hook of each parameter copies its gradient into the bucket's
// gradient buffer and frees it; a complete bucket launches at once (overlapping backward), strictly
// in bucket order on every rank:
//   optimizer (ZeRO-1): all_reduce of a persistent full-size gradient buffer; the owned chunk / N is
//                       the shard gradient (full gradients are held, as in ZeRO-1);
//   gradients (ZeRO-2): reduce_scatter of a buffer that lives only while the collective runs; only the
//                       (chunk) shard gradient stays.
// Non-final micro-steps of gradient accumulation do not communicate: gradients accumulate in .grad.
//
// full (ZeRO-3, shard_gather.cpp): one bucket per unit of the model (the caller's grouping, e.g. a
// GPT block), in reverse unit order (the order backward finishes them). Each rank keeps only its
// chunk of each bucket's parameters (shard_param, which the pieces view); the bucket's full buffer,
// which the model's parameters view, holds memory only while its unit is gathered: its storage is
// given back (0 bytes) between uses and re-allocated for the all-gather. The model's forward calls
// unit_enter / unit_leave (through engine's models::UnitGate); a gradient hook on the unit's
// output re-gathers it for backward and prefetches the unit backward reaches next; once all of a
// unit's gradients are in, its full parameters are freed and its reduce-scatter launched, on every
// micro-step of gradient accumulation: the parameters are gathered for each forward anyway, and
// keeping whole gradients between micro-steps would hold what ZeRO-3 exists to shard. The
// micro-steps' slices are summed into shard_grad.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "dist/dist_context.hpp"
#include "dist/group.hpp"

namespace trainer::dist {

struct ShardBucket {
  std::vector<size_t> params;    // indices into ShardSync's parameter list, in bucket order
  std::vector<int64_t> offsets;  // element offset of each parameter in the bucket
  int64_t numel = 0;             // up to the last parameter's end (alignment gaps included)
  int64_t padded = 0;            // numel rounded up to a multiple of the group size x `align`
  int64_t chunk = 0;             // padded / group size: what each rank owns
  int64_t align = 1;             // kPieceAlign when the bucket holds an aligned parameter
  torch::Tensor flat_param;      // (padded) the parameters' storage
  torch::Tensor flat_grad;       // (padded) all_reduce: persistent; reduce_scatter: only while in flight
  torch::Tensor shard_grad;      // (chunk) this rank's slice of the averaged gradient
  size_t pending = 0;            // gradients not yet ready this step
  std::shared_ptr<AsyncOp> op;
  // full only
  torch::Tensor shard_param;      // (chunk) this rank's slice of the parameters: what the pieces view
  enum class State { Freed, Gathering, Held } state = State::Held;
  std::shared_ptr<AsyncOp> gather_op;
  torch::Tensor rs_out;           // the in-flight reduce-scatter's output: shard_grad, or a later micro-step's
  bool has_grad = false;          // shard_grad holds a micro-step's slice of this step already
};

// The pieces of an aligned parameter start at multiples of this many of its elements: ATen's CPU
// kernels run vectors over a tensor's body and scalar code over its last partial vector, which can
// round differently (the fused AdamW does: measured at one element in ~10^4 a step), so an element
// must not be in a body in one layout and in a tail in another. 64 is a multiple of every vector
// loop's stride (2 x 32 bf16 lanes of AVX-512 at most).
constexpr int64_t kPieceAlign = 64;

// Elements [begin, begin + len) (storage order) of parameter `param` that this rank owns.
struct OwnedPiece {
  size_t param = 0;
  size_t bucket = 0;
  int64_t begin = 0, len = 0;
  int64_t chunk_offset = 0;  // where the piece starts in the bucket's owned chunk
  torch::Tensor value;       // (len) view into the bucket's flat_param: what the optimizer steps
};

// dist.sharding full on CPU: the memory of gathered units, kept for the next gather of a unit of the
// same size instead of going back to malloc (shard_gather.cpp says why).
class UnitBufferPool {
 public:
  ~UnitBufferPool();
  static at::DataPtr take(const std::shared_ptr<UnitBufferPool>& pool, size_t bytes);
  // A zero tensor of `n` elements whose memory comes from the pool on CPU (elsewhere torch::zeros).
  static torch::Tensor zeros(const std::shared_ptr<UnitBufferPool>& pool, int64_t n, const torch::TensorOptions& o);

 private:
  struct Block;
  static void give_back(void* ctx);
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
};

class ShardSync {
 public:
  enum class Grads { AllReduce, ReduceScatter, Full };
  using Aligned = std::unordered_set<const c10::TensorImpl*>;
  // `params` in registration order; those without requires_grad are skipped (they stay replicated).
  // Full: `units` lists each unit's parameters (indices into `params`, all trainable), in forward
  // order; bucket_mb is not used (one bucket per unit).
  // `group` (outliving this) is the ranks that shard these parameters between them. The parameters in
  // `aligned` start at a multiple of kPieceAlign elements of their bucket, whose chunks are multiples
  // of it too, so each of their pieces starts at a multiple of kPieceAlign of the parameter.
  ShardSync(Group& group, std::vector<torch::Tensor> params, double bucket_mb, Grads mode,
            std::vector<std::vector<size_t>> units = {}, const Aligned& aligned = {});
  ~ShardSync();
  ShardSync(const ShardSync&) = delete;
  ShardSync& operator=(const ShardSync&) = delete;

  void set_enabled(bool sync);  // false on non-final micro-steps (gradients accumulate locally)
  // Waits for every bucket; each piece's .grad is then its slice of the gradient averaged over the
  // group's ranks.
  void finish();
  // After the optimizer stepped the pieces: every rank's owned chunks to every rank (the weights).
  // Full: nothing to do (each forward gathers its units).
  void gather_params();

  // full: the unit gate (see above). unit_leave returns `y`, with the backward re-gather hook on it.
  void unit_enter(size_t unit);
  torch::Tensor unit_leave(size_t unit, torch::Tensor y);
  void unit_backward(size_t unit);  // the hook (public for the hook only)
  // full: every unit gathered (a collective) until release_all; written = the parameters were
  // overwritten (a checkpoint or model.init loaded into them): this rank's chunks are taken from them.
  void gather_all();
  void release_all(bool written);
  bool full() const { return mode_ == Grads::Full; }
  // full: the most parameter bytes (and units) gathered whole at one time since reset_peak()
  struct GatherPeak {
    int64_t bytes = 0, units = 0;
  };
  GatherPeak gather_peak() const { return peak_; }
  void reset_peak() { peak_ = now_; }

  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<ShardBucket>& buckets() const { return buckets_; }
  const std::vector<OwnedPiece>& pieces() const { return pieces_; }
  std::vector<torch::Tensor> piece_values() const;
  int64_t world() const { return world_; }  // the group's size and this rank's index in it
  int64_t rank() const { return rank_; }

  // Bytes this rank holds now, measured from the tensors (unique storages).
  int64_t param_bytes() const;
  int64_t grad_bytes() const;  // gradient buffers plus any .grad a parameter still holds

  void on_grad_ready(size_t index);  // the post-accumulate-grad hook (public for the hook only)

 private:
  void build(double bucket_mb);
  void plan_units(const std::vector<std::vector<size_t>>& units);
  void align_slots(const Aligned& aligned);
  void allocate();
  void check_layout();
  void launch(size_t b);
  void reset_step();
  // full (shard_gather.cpp); the caller holds mu_
  void launch_full(size_t b);
  void settle(ShardBucket& b);  // waits for b's reduce-scatter and sums its output into shard_grad
  void gather_async(size_t b);
  void ensure_gathered(size_t b);
  void free_params(size_t b);
  int64_t unit_bucket(size_t unit) const;  // -1: a unit without trainable parameters

  Group& group_;
  Grads mode_;
  int64_t world_ = 1, rank_ = 0;
  std::vector<torch::Tensor> params_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  std::vector<ShardBucket> buckets_;
  std::vector<OwnedPiece> pieces_;
  size_t next_launch_ = 0;
  bool enabled_ = true;
  std::vector<int64_t> unit_bucket_;   // full: bucket of each unit, -1 when it has none
  std::vector<size_t> leave_order_;    // full: units left this forward with a backward to come
  int hold_depth_ = 0;                 // full: gather_all calls not yet released
  GatherPeak now_, peak_;              // full: gathered now, and the most since reset_peak
  std::shared_ptr<UnitBufferPool> pool_ = std::make_shared<UnitBufferPool>();
  uint64_t layout_hash_ = 0;
  std::mutex mu_;
};

}  // namespace trainer::dist
