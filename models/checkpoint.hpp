// Activation checkpointing: run a stage without keeping its activations, recompute them in backward.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace trainer::models {

// Returns fn(x). When autograd is recording, fn runs under no-grad in forward, so only x is kept for
// backward; backward re-runs fn(x) with grad enabled and back-propagates through that recomputation.
// The stage's parameters are inputs of the autograd node, so their gradients flow through the normal
// engine (hooks fire once, torch::autograd::grad works). The recomputation sees the same values as the
// forward: the CPU (and the input's CUDA) generator state is restored around it, so dropout masks
// repeat, and so is the autocast state. Side effects are not repeated: every buffer of `stage` is
// copied before the recomputation and written back after it, so BatchNorm's running_mean,
// running_var and num_batches_tracked are updated once per forward, as without checkpointing.
// Assumes the stage's train/eval mode does not change between forward and backward.
torch::Tensor checkpoint(torch::nn::Module& stage, const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                         const torch::Tensor& x);

}  // namespace trainer::models
