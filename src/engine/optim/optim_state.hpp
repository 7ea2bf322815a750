// The optimizers whose state a run measures, checkpoints and sends: one place that knows their
// per-parameter state types and field names. SGD keeps "momentum_buffer" (none without momentum);
// AdamW keeps a step count ("step") and "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (amsgrad only).
// The fused optimizers (engine/optim.hpp) derive from these and keep the same state types.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace trainer::engine {

enum class OptimStateKind { Sgd, Adamw };

// Throws std::invalid_argument("optimizer state: only SGD and AdamW are supported") for another one.
OptimStateKind optim_state_kind(const torch::optim::Optimizer& opt);

// The tensor fields of `kind`, in the order they are written.
const std::vector<const char*>& optim_state_fields(OptimStateKind kind);
// Every field name of every kind, "step" included (the names a checkpoint may hold).
const std::vector<const char*>& all_optim_state_names();

// Calls `f(field, tensor)` for each tensor field of one parameter's state (undefined ones too: the
// caller skips them). False for a state type that is neither SGD's nor AdamW's.
bool visit_state_tensors(const torch::optim::OptimizerParamState& st,
                         const std::function<void(const char* field, const torch::Tensor& t)>& f);

// AdamW's step count; nullopt for SGD.
std::optional<int64_t> state_step(const torch::optim::OptimizerParamState& st);

// One parameter's state of `kind` from its fields (`field(name)`: the tensor, or undefined when the
// source has none); `step`: AdamW's count. Null when the parameter has none: SGD without a momentum
// buffer, AdamW never stepped (no step).
std::unique_ptr<torch::optim::OptimizerParamState> make_param_state(
    OptimStateKind kind, std::optional<int64_t> step, const std::function<torch::Tensor(const char* field)>& field);

// False when a state made by make_param_state lacks a field its optimizer needs (AdamW's moments).
bool state_complete(const torch::optim::OptimizerParamState& st);

}  // namespace trainer::engine
