#include "engine/step/graphed_step.hpp"

#include <stdexcept>
#include <utility>

#include "device/cuda_graph.hpp"

namespace trainer::engine {
namespace {

// The same number of tensors, each of the same sizes and dtype.
bool same_layout(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].sizes() != b[i].sizes() || a[i].scalar_type() != b[i].scalar_type()) return false;
  return true;
}

}  // namespace

GraphConditions graph_conditions(const config::RunConfig& cfg, bool cuda, Precision precision, int64_t world_size) {
  GraphConditions c;
  c.cuda = cuda;
  c.world_size = world_size;
  c.precision = precision;
  c.nonfinite = cfg.train.nonfinite;
  c.fused_optimizer = cfg.optim.fused;
  c.activation_checkpointing = cfg.model.activation_checkpointing;
  return c;
}

std::string graph_blocker(const GraphConditions& c) {
  if (!c.cuda) return "CUDA graphs need a CUDA device, and this run trains on the CPU";
  if (c.world_size > 1)
    return "the gradient all-reduce of a multi-process run (world size " + std::to_string(c.world_size) +
           ") is not captured";
  if (c.precision == Precision::Fp16)
    return "fp16's loss scaler decides on the host, every step, whether the optimizer steps";
  if (c.nonfinite != config::NonFinite::Abort)
    return "train.nonfinite: " + config::name_of(c.nonfinite) + " checks the gradient norm on the host every step";
  if (!c.fused_optimizer)
    return "optim.fused: false steps parameters in a host loop with host-side step counts";
  if (c.activation_checkpointing)
    return "activation checkpointing saves and restores the CUDA generator's state, which a capture cannot read";
  if (c.fault_injection) return "TRAINER_INJECT_NONFINITE_GRAD edits gradients between the step's phases";
  if (!c.uniform_lr)
    return "optim.groups / optim.layer_decay give parameter groups their own learning rates, and a captured step "
           "reads one";
  return "";
}

GraphedStep::GraphedStep(torch::optim::Optimizer& opt, std::vector<torch::Tensor> params, const torch::Device& device,
                         StepBody body)
    : opt_(opt),
      hooks_(dynamic_cast<GraphableOptimizer*>(&opt)),
      params_(std::move(params)),
      device_(device),
      body_(std::move(body)),
      graph_(std::make_unique<device::CudaGraph>()) {
  if (!hooks_) throw std::invalid_argument("GraphedStep needs a fused optimizer (optim.fused: true)");
}

GraphedStep::~GraphedStep() = default;

bool GraphedStep::captured() const { return graph_->captured(); }

std::optional<StepTensors> GraphedStep::capture_and_run(std::vector<torch::Tensor> inputs,
                                                        std::vector<torch::Tensor> targets, double lr) {
  if (graph_->captured()) throw std::logic_error("GraphedStep: already captured");
  failure_.clear();
  opt_.zero_grad(/*set_to_none=*/true);  // the capture's backward allocates the gradients in the graph's pool
  inputs_ = std::move(inputs);
  targets_ = std::move(targets);
  lr_ = torch::full({}, lr, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  hooks_->read_lr_from(lr_);
  const int64_t calls_before = hooks_->step_calls();
  try {
    graph_->capture([&] { out_ = body_(inputs_, targets_); });
  } catch (const std::exception& e) {
    failure_ = e.what();
  }
  // optimizer.step() ran during the capture (its host counts moved), even if the body failed later
  const bool stepped = hooks_->step_calls() != calls_before;
  if (failure_.empty() && !hooks_->last_step_fused())
    failure_ = "some gradients are laid out unlike their parameters, so the fused optimizer kernels cannot take "
               "them and a host loop steps those parameters";
  if (!failure_.empty()) {
    if (stepped) hooks_->count_steps(-1);  // the captured step never ran
    hooks_->read_lr_from({});
    opt_.zero_grad(/*set_to_none=*/true);
    graph_ = std::make_unique<device::CudaGraph>();
    inputs_.clear();
    targets_.clear();
    out_ = {};
    return std::nullopt;
  }
  graph_->replay();  // the capture only recorded the step: this runs it (its host counts are already in)
  return StepTensors{out_.loss.clone(), out_.grad_norm.clone()};
}

std::optional<StepTensors> GraphedStep::replay(const std::vector<torch::Tensor>& inputs,
                                               const std::vector<torch::Tensor>& targets, double lr) {
  if (!graph_->captured()) throw std::logic_error("GraphedStep: replay before a capture");
  if (!same_layout(inputs, inputs_) || !same_layout(targets, targets_)) return std::nullopt;
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < inputs.size(); ++i) inputs_[i].copy_(inputs[i], /*non_blocking=*/true);
    for (size_t i = 0; i < targets.size(); ++i) targets_[i].copy_(targets[i], /*non_blocking=*/true);
    lr_.fill_(lr);
  }
  graph_->replay();
  hooks_->count_steps(+1);
  // copies: the next replay overwrites the static outputs, while the caller keeps the loss until a log step
  return StepTensors{out_.loss.clone(), out_.grad_norm.clone()};
}

void GraphedStep::before_eager_step(double lr) {
  opt_.zero_grad(/*set_to_none=*/true);
  if (lr_.defined()) {
    torch::NoGradGuard ng;
    lr_.fill_(lr);
  }
}

}  // namespace trainer::engine
