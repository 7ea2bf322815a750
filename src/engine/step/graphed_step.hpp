// train.cuda_graphs: the whole optimizer step (grad_accum forward/backward micro-batches, gradient
// clipping, the fused optimizer update) captured once into a CUDA graph and replayed for every later
// step, so that a step costs one graph launch instead of a few thousand kernel launches from the host.
//
// The Trainer runs kGraphWarmupSteps eager steps first (cuDNN picks its algorithms, cuBLAS gets its
// workspace, the optimizer creates its state and its step counters), all on one side stream, then
// GraphedStep captures the step body on the device batches of the next step and replays it; later
// steps copy their batches into those same tensors and replay. The learning rate is a device tensor
// filled before each replay; the loss and the gradient norm are read from the tensors the capture
// wrote. Shapes are static: a batch of another shape runs eagerly.
//
// Where a graph cannot hold the step, the run trains eagerly and logs why: graph_blocker() names the
// settings that rule it out before training starts, capture() reports what failed at capture.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/optim/optim.hpp"
#include "engine/optim/precision.hpp"

namespace trainer::device {
class CudaGraph;
}

namespace trainer::engine {

constexpr int64_t kGraphWarmupSteps = 3;  // eager steps of each process before the capture

// The settings that decide whether a step can be captured.
struct GraphConditions {
  bool cuda = false;                    // the run trains on a CUDA device
  int64_t world_size = 1;
  Precision precision = Precision::Fp32;
  config::NonFinite nonfinite = config::NonFinite::Abort;  // train.nonfinite
  bool fused_optimizer = true;          // optim.fused
  bool activation_checkpointing = false;
  bool fault_injection = false;         // TRAINER_INJECT_NONFINITE_GRAD is set
  bool uniform_lr = true;               // every parameter group trains at the schedule's rate
};

// The conditions of a run (the caller adds fault_injection and uniform_lr).
GraphConditions graph_conditions(const config::RunConfig& cfg, bool cuda, Precision precision, int64_t world_size);

// Why a step cannot be captured under `c` (a sentence for the log), or "" when it can.
std::string graph_blocker(const GraphConditions& c);

// What the captured step leaves behind, per step.
struct StepTensors {
  torch::Tensor loss;       // the sum of the micro-batches' mean losses, float32 scalar
  torch::Tensor grad_norm;  // the global gradient norm before clipping, float32 scalar
};

// The step's work on device batches (one input and one target per micro-batch): forward/backward
// of each, clip, optimizer.step(); no host synchronisation, no zero_grad (the capture starts with
// the gradients unset, so the first backward writes them and later ones accumulate).
using StepBody = std::function<StepTensors(const std::vector<torch::Tensor>& inputs,
                                           const std::vector<torch::Tensor>& targets)>;

class GraphedStep {
 public:
  // `opt` must be a GraphableOptimizer (optim.fused); `params` are its parameters.
  GraphedStep(torch::optim::Optimizer& opt, std::vector<torch::Tensor> params, const torch::Device& device,
              StepBody body);
  ~GraphedStep();

  bool captured() const;
  // Why the last capture failed ("" when none did).
  const std::string& failure() const { return failure_; }

  // Captures the body on these device batches, which become the graph's static inputs, and runs it
  // once (this step). Returns nullopt when the capture failed: nothing of the step ran, the
  // gradients are unset and the optimizer is as before, so the caller can run the step eagerly.
  std::optional<StepTensors> capture_and_run(std::vector<torch::Tensor> inputs, std::vector<torch::Tensor> targets,
                                             double lr);

  // Copies the batches (host or device) into the static inputs and replays. nullopt when their
  // shapes or dtypes differ from the captured ones; then call before_eager_step() and step eagerly.
  std::optional<StepTensors> replay(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets,
                                    double lr);

  // Readies the optimizer for an eager step between replays: unsets the gradients (the graph keeps
  // its own) and sets the device learning rate.
  void before_eager_step(double lr);

 private:
  torch::optim::Optimizer& opt_;
  GraphableOptimizer* hooks_ = nullptr;
  std::vector<torch::Tensor> params_;
  torch::Device device_;
  StepBody body_;
  std::unique_ptr<device::CudaGraph> graph_;
  std::vector<torch::Tensor> inputs_, targets_;  // the static inputs
  torch::Tensor lr_;                             // float32 scalar on the device
  StepTensors out_;                              // the static outputs
  std::string failure_;
};

}  // namespace trainer::engine
