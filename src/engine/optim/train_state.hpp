// The parts of a training run's state that live inside LibTorch objects, as named tensors for a
// checkpoint (io/checkpoint.hpp) and back: optimizer state per parameter, and RNG streams.
#pragma once

#include <torch/torch.h>

#include <stdexcept>

#include "io/checkpoint.hpp"

namespace trainer::engine {

// "<param name>.<field>" for every parameter that has state: SGD momentum_buffer; AdamW exp_avg,
// exp_avg_sq, max_exp_avg_sq (amsgrad) and step (int64 scalar). Parameter names are the model's own
// (the first name of a tied tensor). CPU copies. Throws std::invalid_argument for another optimizer.
io::NamedTensors optimizer_state_tensors(const torch::optim::Optimizer& opt, const torch::nn::Module& model);

// Replaces the optimizer's state by `tensors` (moved to each parameter's device and dtype). Every
// parameter of the optimizer must be found by name, every tensor must belong to one and have its
// shape: otherwise std::runtime_error listing what does not match (a different model or optimizer).
void load_optimizer_state(torch::optim::Optimizer& opt, const torch::nn::Module& model, const io::NamedTensors& tensors);

// "cpu" (the default CPU generator) and, on CUDA, "cuda" (the device's default generator): uint8 state tensors.
io::NamedTensors rng_state_tensors(const torch::Device& device);
void restore_rng_state(const io::NamedTensors& tensors, const torch::Device& device);

}  // namespace trainer::engine
