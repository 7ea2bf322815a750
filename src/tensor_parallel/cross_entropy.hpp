// Cross entropy over vocabulary-parallel logits: each rank holds the logits of its rows of the
// (padded) vocabulary and the full logits are never gathered. Per position, three numbers cross the
// group: the max (one MAX all-reduce), then the sum of exponentials, the target's logit and the sum
// of the real logits (label smoothing) in one SUM all-reduce. Padding columns are left out of all of
// them and get no gradient. The backward is local: softmax - (1 - eps) onehot - eps / V.
#pragma once

#include <torch/torch.h>

#include "tensor_parallel/communicator.hpp"
#include "tensor_parallel/sharding.hpp"

namespace trainer::tensor_parallel {

// local_logits (..., shard.local()) and target (...) int64 of the real vocabulary -> the loss at every
// position (...), 0 where target == ignore_index. Equals torch's cross_entropy(full_logits, target,
// label_smoothing=eps, reduction=none) over the real vocabulary. Reduced precision logits are
// computed in fp32 (the gradient returns in their dtype).
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits, const torch::Tensor& target,
                                           const VocabShard& shard, Communicator& comm, double label_smoothing = 0.0,
                                           int64_t ignore_index = -100);

// torch's reduction "mean": the sum of the losses over the positions that are not ignored.
torch::Tensor mean_over_targets(const torch::Tensor& losses, const torch::Tensor& target, int64_t ignore_index = -100);

// The whole real vocabulary's logits (..., vocab) on every rank, padding dropped: for evaluation
// metrics and sampling, never for the training loss. Not differentiable.
torch::Tensor gather_vocab_logits(const torch::Tensor& local_logits, const VocabShard& shard, Communicator& comm);

}  // namespace trainer::tensor_parallel
