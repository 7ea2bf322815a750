// The flat, padded, bucketed parameter and gradient buffers of the sharded strategies
// (dist.sharding optimizer | gradients), and the collectives that keep them in step.
//
// Layout (identical on every rank, checked once like GradSync's): the trainable parameters in reverse
// registration order (roughly the order backward produces their gradients) are packed into buckets
// of about dist.bucket_mb, one dtype and device per bucket. Each bucket is padded with zeros to a
// multiple of the world size N and cut into N equal chunks: rank r owns chunk r of every bucket.
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
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dist/dist_context.hpp"

namespace trainer::dist {

struct ShardBucket {
  std::vector<size_t> params;    // indices into ShardSync's parameter list, in bucket order
  std::vector<int64_t> offsets;  // element offset of each parameter in the bucket
  int64_t numel = 0;             // without padding
  int64_t padded = 0;            // numel rounded up to a multiple of the world size
  int64_t chunk = 0;             // padded / world size: what each rank owns
  torch::Tensor flat_param;      // (padded) the parameters' storage
  torch::Tensor flat_grad;       // (padded) all_reduce: persistent; reduce_scatter: only while in flight
  torch::Tensor shard_grad;      // (chunk) this rank's slice of the averaged gradient
  size_t pending = 0;            // gradients not yet ready this step
  std::shared_ptr<AsyncOp> op;
};

// Elements [begin, begin + len) (storage order) of parameter `param` that this rank owns.
struct OwnedPiece {
  size_t param = 0;
  size_t bucket = 0;
  int64_t begin = 0, len = 0;
  int64_t chunk_offset = 0;  // where the piece starts in the bucket's owned chunk
  torch::Tensor value;       // (len) view into the bucket's flat_param: what the optimizer steps
};

class ShardSync {
 public:
  enum class Grads { AllReduce, ReduceScatter };
  // `params` in registration order; those without requires_grad are skipped (they stay replicated).
  ShardSync(DistContext& ctx, std::vector<torch::Tensor> params, double bucket_mb, Grads mode);
  ~ShardSync();
  ShardSync(const ShardSync&) = delete;
  ShardSync& operator=(const ShardSync&) = delete;

  void set_enabled(bool sync);  // false on non-final micro-steps (gradients accumulate locally)
  // Waits for every bucket; each piece's .grad is then its slice of the gradient averaged over ranks.
  void finish();
  // After the optimizer stepped the pieces: every rank's owned chunks to every rank (the weights).
  void gather_params();

  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<ShardBucket>& buckets() const { return buckets_; }
  const std::vector<OwnedPiece>& pieces() const { return pieces_; }
  std::vector<torch::Tensor> piece_values() const;
  int64_t world() const { return world_; }
  int64_t rank() const { return rank_; }

  // Bytes this rank holds now, measured from the tensors (unique storages).
  int64_t param_bytes() const;
  int64_t grad_bytes() const;  // gradient buffers plus any .grad a parameter still holds

  void on_grad_ready(size_t index);  // the post-accumulate-grad hook (public for the hook only)

 private:
  void build(double bucket_mb);
  void check_layout();
  void launch(size_t b);
  void reset_step();

  DistContext& ctx_;
  Grads mode_;
  int64_t world_ = 1, rank_ = 0;
  std::vector<torch::Tensor> params_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  std::vector<ShardBucket> buckets_;
  std::vector<OwnedPiece> pieces_;
  size_t next_launch_ = 0;
  bool enabled_ = true;
  uint64_t layout_hash_ = 0;
  std::mutex mu_;
};

}  // namespace trainer::dist
