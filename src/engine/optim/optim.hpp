// Optimizer construction from OptimConfig: SGD (momentum, Nesterov, weight decay) or AdamW
// (decoupled weight decay), with two parameter groups so that biases, normalisation weights and
// embeddings get no weight decay unless optim.decay_norm_and_bias is set.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "engine/optim/param_groups.hpp"

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

// The groups of plan_param_groups (engine/optim/param_groups.hpp): group 0 decays (cfg.weight_decay),
// group 1 (if non-empty) has weight_decay 0, then the groups of optim.groups / optim.layer_decay.
// cfg.fused: the step runs ATen's fused multi-tensor kernels (FusedAdamW / FusedSGD below), else
// LibTorch's per-parameter loop. Throws std::invalid_argument for an unknown optimizer name.
std::unique_ptr<torch::optim::Optimizer> build_optimizer(const config::OptimConfig& cfg,
                                                         const torch::nn::Module& model);
// The same over given groups (the sharded strategies pass each group's pieces this rank steps;
// names unused). Every rank passes the same number of groups, some possibly empty.
std::unique_ptr<torch::optim::Optimizer> build_optimizer(const config::OptimConfig& cfg,
                                                         const std::vector<GroupPlan>& plans);

// The learning rate of each parameter group over the schedule's (optim.groups, optim.layer_decay):
// set_learning_rate gives group i lr x lr_scales[i]. Every optimizer build_optimizer returns has it.
class LrScales {
 public:
  virtual ~LrScales() = default;
  std::vector<double> lr_scales;  // one per group; missing entries count as 1
};

// LibTorch's per-parameter optimizers (optim.fused: false) with the scales.
template <class Base>
class ScaledOptimizer : public Base, public LrScales {
 public:
  using Base::Base;
};

// What train.cuda_graphs (engine/step/graphed_step.hpp) needs from an optimizer whose step() it captures:
// a learning rate read from device memory (a captured float would be frozen into the graph), the
// host-side bookkeeping of a step whose kernels ran as a replay, and whether the last step() ran
// only fused kernels (a host loop cannot be replayed). FusedAdamW and FusedSGD implement it.
class GraphableOptimizer {
 public:
  virtual ~GraphableOptimizer() = default;
  // From now on every group's learning rate is read from `lr` (a float32 scalar on the parameters'
  // device; every group gets the same rate, as set_learning_rate sets them); undefined: the groups'
  // options again. The caller keeps the options in step too (checkpoints save them).
  virtual void read_lr_from(torch::Tensor lr) = 0;
  // Adds `delta` to the host-side step counts of the parameters the last step() updated: +1 after a
  // replay of a captured step(), -1 to take back the count of a capture that failed.
  virtual void count_steps(int64_t delta) = 0;
  // True when the last step() updated every parameter with a gradient through the fused kernels.
  virtual bool last_step_fused() const = 0;
  // How many times step() has run (its host-side part: a captured step() counts once).
  virtual int64_t step_calls() const = 0;
};

// torch::optim::AdamW / SGD whose step() runs one ATen fused kernel (_fused_adamw_, _fused_sgd_) per
// group, device and dtype instead of ~8 ATen ops per parameter; the same update rule (PyTorch's
// fused=True path), state objects and checkpoint format as the base class, so a run can switch
// between fused and unfused across a resume. Parameters whose gradient is not laid out like the
// parameter (strides differ or the tensor is not dense), and sparse gradients, take the base class's
// per-parameter loop.
class FusedAdamW : public torch::optim::AdamW, public GraphableOptimizer, public LrScales {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
  void read_lr_from(torch::Tensor lr) override { lr_ = std::move(lr); }
  void count_steps(int64_t delta) override;
  bool last_step_fused() const override { return last_fused_; }
  int64_t step_calls() const override { return step_calls_; }

 private:
  int64_t step_calls_ = 0;
  torch::Tensor lr_;                // defined: the learning rate of every group (read_lr_from)
  std::vector<const void*> stepped_;  // state keys the last step() updated through the fused kernels
  bool last_fused_ = true;
  struct StepCounter {
    int64_t value = -1;   // the step count `tensor` holds
    torch::Tensor tensor; // float32 scalar on the parameter's device, as the kernel reads it
  };
  std::unordered_map<const void*, StepCounter> counters_;
};

class FusedSGD : public torch::optim::SGD, public GraphableOptimizer, public LrScales {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
  void read_lr_from(torch::Tensor lr) override { lr_ = std::move(lr); }
  void count_steps(int64_t) override {}  // SGD keeps no step count
  bool last_step_fused() const override { return last_fused_; }
  int64_t step_calls() const override { return step_calls_; }

 private:
  int64_t step_calls_ = 0;
  torch::Tensor lr_;
  bool last_fused_ = true;
};

// True when the fused kernels can update `p` with its current gradient (see above).
bool fused_update_supported(const torch::Tensor& p);

// Sets the learning rate of every parameter group: lr times the group's LrScales entry.
void set_learning_rate(torch::optim::Optimizer& opt, double lr);
// True when every group trains at the same rate (a CUDA graph reads one learning rate).
bool uniform_learning_rate(const torch::optim::Optimizer& opt);

}  // namespace trainer::engine
