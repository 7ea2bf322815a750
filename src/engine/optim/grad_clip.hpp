// Global gradient norm and clipping by it, computed on the device (no host synchronisation).
#pragma once

#include <torch/torch.h>

#include <vector>

namespace trainer::engine {

// sqrt(sum of squared gradient entries) over every parameter that has a gradient: a 0-dim float
// tensor on the gradients' device (0 when no parameter has one).
torch::Tensor global_grad_norm(const std::vector<torch::Tensor>& params);

// Scales every gradient by min(1, max_norm / (norm + 1e-6)) when max_norm > 0 (torch's
// clip_grad_norm_ rule). Returns the norm before clipping, as global_grad_norm does.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace trainer::engine
