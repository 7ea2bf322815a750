// Optimizer construction from OptimConfig: SGD (momentum, Nesterov, weight decay) or AdamW
// (decoupled weight decay), with two parameter groups so that biases, normalisation weights and
// embeddings get no weight decay unless optim.decay_norm_and_bias is set.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace trainer::engine {

struct ParamGroups {
  std::vector<std::string> decay_names, no_decay_names;  // first name of each parameter
  std::vector<torch::Tensor> decay, no_decay;
};

// Unique trainable parameters of `model` (tied weights once, under their first name), split:
// no decay for tensors with fewer than 2 dims (biases, norm scales/shifts) and for the weights of
// torch::nn::Embedding modules, unless decay_norm_and_bias is true (then everything decays).
ParamGroups split_decay_groups(const torch::nn::Module& model, bool decay_norm_and_bias);

// Every unique trainable parameter of `model`, in named_parameters() order.
std::vector<torch::Tensor> unique_parameters(const torch::nn::Module& model);

// Group 0 decays (weight_decay = cfg.weight_decay), group 1 (if non-empty) has weight_decay 0.
// Throws std::invalid_argument for an unknown optimizer name.
std::unique_ptr<torch::optim::Optimizer> build_optimizer(const config::OptimConfig& cfg,
                                                         const torch::nn::Module& model);

// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& opt, double lr);

}  // namespace trainer::engine
