// Pipeline parallel in a run (dist.pipeline_parallel P > 1, docs/PIPELINE.md): this rank's stages of
// the run's plan (pipeline/plan.hpp), the step over them (pipeline/executor.hpp through a
// dist::GroupPeerLink on the mesh's pp group), evaluation through the stages, and the strategy that
// wraps the data-parallel one so that the rest of the step (sync, clip, fp16 vote, checkpoint) sees
// the whole model.
//
// Every rank builds the whole model with the run's seed (so its weights are one process's) and
// trains only the parameters its stages own or read: keep_stages() turns requires_grad off for the
// others before the run collects its parameters, so the optimizer, the data-parallel buckets and the
// EMA see this rank's share alone. A parameter read by stages on two ranks (GPT's tied wte: the
// embedding on the first stage, the logits on the last) has its gradient summed between those ranks
// after every backward, so the two copies take the same steps and stay equal bit for bit.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "dist/device_mesh.hpp"
#include "dist/dist_context.hpp"
#include "engine/optim/precision.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "models/model.hpp"

namespace trainer::engine {

class PipelineStages {
 public:
  // Every rank of the world with P > 1 (a collective: the tied-weight group of the first and last
  // stage's ranks of each (dp, tp) coordinate). The mesh outlives this.
  PipelineStages(dist::DistContext& dist, dist::DeviceMesh& mesh, const config::RunConfig& cfg);
  ~PipelineStages();
  PipelineStages(const PipelineStages&) = delete;
  PipelineStages& operator=(const PipelineStages&) = delete;

  // train.batch_size auto, chosen after construction: the schedule's microbatches become `cfg`'s now
  // (dist.pipeline.microbatches, or auto's divisor of the chosen micro-batch).
  void set_batch(const config::RunConfig& cfg);

  // On the model built on the CPU, before it moves to the device (models::BuildContext::before_move):
  // the parameters no stage of this rank owns or reads stop requiring gradients and are released
  // (io::release_weight), so they never take device memory. A collective of the pp group's first and
  // last ranks when they share a tied parameter (their group is made here).
  void keep_stages(models::Model& model);
  // Whether a stage of this rank runs unit `unit` of the model (models::BuildContext::keeps_unit).
  bool holds_unit(int64_t unit) const;

  // One step's forwards and backwards over `input` / `target` (the step's batches concatenated, cut
  // into grad_accum x M equal microbatches), gradients accumulated into this rank's parameters as one
  // process's gradient accumulation would. `loss(logits, target)` is the training loss of a
  // microbatch. `loss_scale` (fp16's LossScaler::scale_tensor(); undefined: none) multiplies the
  // last stage's losses before their backward, so the gradients passed between the stages carry it
  // as one process's scaled backward does. Returns the sum of the unscaled microbatch losses (fp32,
  // on every rank of the pp group) and their count.
  struct StepLoss {
    torch::Tensor sum;
    int64_t count = 0;
  };
  StepLoss forward_backward(models::Model& model, const torch::Tensor& input, const torch::Tensor& target,
                            int64_t accum, Precision precision, const torch::Device& device,
                            const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& loss,
                            const torch::Tensor& loss_scale = {});

  // Evaluation: the model's output for `input` (forward's, as the last stage makes it) on every rank
  // of the pp group, the stages run in order with their activations sent point to point. A collective
  // of the pp group.
  torch::Tensor forward(models::Model& model, const torch::Tensor& input);

  // The run's strategy: `inner` (the data-parallel one over the dp group) plus the tied weights' sum
  // after backward, the gradient norm over every stage, the fp16 overflow vote over the world and a checkpoint
  // part that writes this rank's stages' tensors (each parameter once, by the rank that owns it).
  std::unique_ptr<DataParallel> wrap(std::unique_ptr<DataParallel> inner);

  // The end of a run: the first and last stage's copies of each tied parameter compared bit for bit
  // (a collective of those two ranks; nothing elsewhere). std::runtime_error naming it when they differ.
  void check_tied(const models::Model& model) const;

  double wait_seconds() const;  // the step's receives spent waiting so far (the bubble's measure)
  // The most bytes this rank's microbatches held at once so far, sampled between the schedule's
  // actions (device::HeldBytesMeter: the activations kept for backward, the messages received, the
  // gradients passed between stages; the parameters' gradients are not counted): the schedule's
  // activation footprint, measured (GPipe holds M microbatches' at its peak, 1F1B at most P).
  int64_t activation_peak_bytes() const;
  int64_t stage_rank() const;   // this rank's pp coordinate
  std::string describe() const; // "stages 0 (units 0-3) on pp rank 0 of 2, 1f1b, 4 microbatches"

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainer::engine
