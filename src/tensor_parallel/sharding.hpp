// Which part of a global (T = 1) tensor a rank holds, and the rules that cut one. Every shard is an
// exact slice of the full tensor (copied bit for bit), so a model at T ranks starts from the weights
// the same seed gives at T = 1, and a checkpoint can name each tensor by its global name and shape
// with the ranges each rank holds.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "tensor_parallel/communicator.hpp"

namespace trainer::tensor_parallel {

using Range = std::pair<int64_t, int64_t>;  // [begin, end)

// How a rank's local tensor sits in the global one: along `dim`, the local tensor is the global
// ranges concatenated in order. dim < 0: replicated (every rank holds all of it). `partial_grad`:
// replicated, but each rank's gradient is only its share (a LayerNorm or bias inside a sequence-
// parallel region): the gradients must be summed over the tp group before the optimizer step.
struct ShardSpec {
  int64_t dim = -1;
  std::vector<int64_t> global_shape;
  std::vector<Range> ranges;
  bool partial_grad = false;
  // along dim: the global tensor's real extent when its tail is padding (the vocabulary padded to a
  // multiple of T: checkpoints and exports drop it); -1 = no padding
  int64_t real = -1;
  bool replicated() const { return dim < 0; }
};

// Rank `rank` of `size`'s contiguous chunk of [0, n); n must divide by size.
Range chunk_range(int64_t n, int64_t rank, int64_t size);

// The rows of a fused [3C, C] q|k|v weight (or [3C] bias) that hold rank's heads, per block: the
// q rows of heads [rank * H/T, (rank+1) * H/T), then the same heads' k rows, then their v rows.
// GPT's c_attn and ViT's in_proj_weight are laid out so. n_head must divide by size.
std::vector<Range> qkv_head_ranges(int64_t n_embd, int64_t n_head, int64_t rank, int64_t size);

// `full`'s `ranges` along `dim`, concatenated: a contiguous copy, bit for bit. A released `full` (a
// pipeline rank's other stage: io::release_weight's form, one element broadcast by zero strides)
// gives a released slice of the slice's shape: nothing is allocated for it.
torch::Tensor take_ranges(const torch::Tensor& full, int64_t dim, const std::vector<Range>& ranges);

// io::is_released's test (tensor_parallel does not link io): more than one element, and a zero stride
// on every dimension that has a step.
bool released_form(const torch::Tensor& t);

// The spec of `take_ranges(full, dim, ranges)`; dim < 0 for a replicated tensor.
ShardSpec spec_of(const torch::Tensor& full, int64_t dim, std::vector<Range> ranges, bool partial_grad = false);

// A vocabulary of `vocab` tokens over `size` ranks. A vocabulary that does not divide is padded at
// its end to the next multiple of size; the padding rows are zero, never looked up, and masked out
// of the softmax (cross_entropy.hpp); exports drop them.
struct VocabShard {
  int64_t vocab = 0;   // the real vocabulary
  int64_t padded = 0;  // a multiple of the group size
  int64_t start = 0, end = 0;  // this rank's rows of the padded vocabulary
  int64_t local() const { return end - start; }
  // how many of this rank's rows are real tokens (the padding is the tail of the last ranks)
  int64_t real() const { return std::max<int64_t>(0, std::min(end, vocab) - start); }
};
int64_t padded_vocab(int64_t vocab, int64_t size);
VocabShard vocab_shard(int64_t vocab, int64_t rank, int64_t size);

// Sums, over the tp group, the gradients of the parameters whose spec says partial_grad (after
// backward, before clipping and the step). Parameters without a gradient are skipped.
void sum_partial_grads(const std::vector<torch::Tensor>& params, Communicator& comm);

}  // namespace trainer::tensor_parallel
