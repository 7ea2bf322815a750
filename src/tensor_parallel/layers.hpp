// Megatron-style tensor-parallel layers over a Communicator. Each is built from the full (T = 1)
// weight by slicing it (sharding.hpp), so a shard is an exact slice of what the same seed gives at
// T = 1; shard_specs() says where each parameter sits in the global tensor. Parameter names are
// those of torch::nn::Linear / Embedding ("weight", "bias"), so a model keeps its nanoGPT /
// torchvision names.
//
//   ColumnParallelLinear  y_local = x W_r^T + b_r, W_r a set of output rows (contiguous, or a fused
//                         qkv's head groups); input enters through copy_to_region (gather_from_
//                         sequence with sequence parallel); optionally gathers its output
//   RowParallelLinear     y = sum_r x_r W_r^T + b, W_r a chunk of input columns; leaves through
//                         reduce_from_region (reduce_scatter_to_sequence with sequence parallel)
//   VocabParallelEmbedding  rows [start, end) of the padded vocabulary; ids outside are looked up as
//                         row 0 and zeroed, then the ranks' outputs are summed
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "tensor_parallel/communicator.hpp"
#include "tensor_parallel/sharding.hpp"

namespace trainer::tensor_parallel {

using NamedSpecs = std::vector<std::pair<std::string, ShardSpec>>;

struct ParallelOptions {
  bool sequence_parallel = false;  // activations outside the region are sharded along seq_dim
  int64_t seq_dim = 1;             // (B, T, C): the sequence is dim 1
};

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  // Rows `rows` of the full weight [out, in] (and bias [out], undefined for none).
  ColumnParallelLinearImpl(const torch::Tensor& full_weight, const torch::Tensor& full_bias, std::vector<Range> rows,
                           Communicator& comm, ParallelOptions opts = {}, bool gather_output = false);
  torch::Tensor forward(const torch::Tensor& x);
  NamedSpecs shard_specs() const;

  torch::Tensor weight, bias;

 private:
  Communicator* comm_;
  ParallelOptions opts_;
  bool gather_output_;
  ShardSpec wspec_, bspec_;
};
TORCH_MODULE(ColumnParallelLinear);

// The contiguous chunk of output rows rank comm.rank() owns.
ColumnParallelLinear column_parallel(const torch::Tensor& full_weight, const torch::Tensor& full_bias,
                                     Communicator& comm, ParallelOptions opts = {}, bool gather_output = false);
// A fused [3C, C] q|k|v projection split by whole heads (qkv_head_ranges): rank r's output holds the
// q, k and v of its n_head / T heads, in that order.
ColumnParallelLinear qkv_column_parallel(const torch::Tensor& full_weight, const torch::Tensor& full_bias,
                                         int64_t n_head, Communicator& comm, ParallelOptions opts = {});

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  // Input columns chunk comm.rank() of the full weight [out, in]; the bias [out] stays whole and is
  // added once, after the reduction. input_is_parallel false: the input is whole and is scattered first.
  RowParallelLinearImpl(const torch::Tensor& full_weight, const torch::Tensor& full_bias, Communicator& comm,
                        ParallelOptions opts = {}, bool input_is_parallel = true);
  torch::Tensor forward(const torch::Tensor& x);
  NamedSpecs shard_specs() const;

  torch::Tensor weight, bias;

 private:
  Communicator* comm_;
  ParallelOptions opts_;
  bool input_is_parallel_;
  ShardSpec wspec_, bspec_;
};
TORCH_MODULE(RowParallelLinear);

class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  // full_weight [vocab, C]: this rank's rows of it padded to vocab_shard(vocab, rank, T).padded.
  VocabParallelEmbeddingImpl(const torch::Tensor& full_weight, Communicator& comm, ParallelOptions opts = {});
  // ids (B, T) int64 in [0, vocab) -> (B, T, C), or (B, T/T_tp, C) with sequence parallel
  torch::Tensor forward(const torch::Tensor& ids);
  const VocabShard& shard() const { return shard_; }
  NamedSpecs shard_specs() const;

  torch::Tensor weight;

 private:
  Communicator* comm_;
  ParallelOptions opts_;
  VocabShard shard_;
};
TORCH_MODULE(VocabParallelEmbedding);

// What ColumnParallelLinear computes, on a weight and bias held elsewhere (under a model's own names,
// such as torchvision's self_attention.in_proj_weight): x enters the region (copy_to_region, or
// gather_from_sequence with sequence parallel), then x W^T + b with this rank's rows W, b.
torch::Tensor column_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                     Communicator& comm, const ParallelOptions& opts = {});

// The specs of every ColumnParallelLinear, RowParallelLinear and VocabParallelEmbedding under `root`,
// named as root.named_parameters() names them ("<module path>.weight", ...).
NamedSpecs layer_shard_specs(const torch::nn::Module& root);

// The tied lm_head: logits over this rank's vocabulary rows, never gathered (feed them to
// vocab_parallel_cross_entropy). x is whole (copy_to_region) or, with sequence parallel, sharded
// along seq_dim (gather_from_sequence). local_weight: the embedding's [V_padded / T, C].
torch::Tensor parallel_lm_logits(const torch::Tensor& x, const torch::Tensor& local_weight, Communicator& comm,
                                 ParallelOptions opts = {});

}  // namespace trainer::tensor_parallel
