// The data-parallel strategy seam: how the ranks' replicas stay in step. The run calls these hooks
// and never asks whether it is distributed; a single process is a world of one whose hooks do
// nothing. Today's one multi-rank strategy is replicated DDP (dist::GradSync: bucketed all-reduce
// launched from gradient hooks, overlapping backward). The sharded strategies (dist.sharding)
// will be further implementations behind the same seam, adding the hooks they need (the
// optimizer step, checkpoint state, export).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "dist/dist_context.hpp"

namespace trainer::engine {

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual std::string name() const = 0;  // for the log: "single process", "replicated (DDP)"
  // Before training: the same weights on every rank (rank 0's; on a fresh start model.init then loads
  // the same file on every rank), then whatever the strategy attaches to the model's unique trainable
  // parameters `params` (train.freeze's parameters are not among them: no bucket, no hook).
  virtual void prepare(torch::nn::Module& model, const std::vector<torch::Tensor>& params) = 0;
  // Before each micro-batch's backward: only the last micro-batch of a step communicates.
  virtual void before_backward(bool last_micro_batch) = 0;
  // After the step's last backward: every rank holds the averaged gradients when this returns.
  virtual void after_backward() = 0;
};

// A world of one when `dist` is inactive, else the strategy dist.* asks for (replicated DDP).
std::unique_ptr<DataParallel> make_data_parallel(dist::DistContext& dist, const config::DistConfig& cfg);

}  // namespace trainer::engine
