// Evaluation of the validation split: every rank scores its own shard (the loader shards it), and
// the run's figures are the count-weighted means over all ranks.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>

#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "dist/dist_context.hpp"
#include "dist/launch_env.hpp"
#include "engine/eval/eval_metrics.hpp"
#include "engine/optim/precision.hpp"
#include "models/model.hpp"

namespace trainer::engine {

// The loader of a run's training (train = true) or validation split on this rank: the config's batch,
// workers, prefetch and seed, this rank's shard, pinned batches copied by the loader on CUDA. One
// function for the Trainer and `trainer eval`, so eval reads the very batches the run scored.
data::LoaderOptions run_loader_options(const config::RunConfig& cfg, const dist::LaunchEnv& env,
                                       const torch::Device& device, bool train);

// A batch tensor on the model's device: non-blocking (pinned batches copy asynchronously), and
// channels-last for image inputs when the model runs channels-last.
torch::Tensor to_model_device(const torch::Tensor& t, const torch::Device& device, bool channels_last_image);

struct EvalSetup {
  data::LoaderOptions loader;   // train = false
  Precision precision = Precision::Fp32;
  torch::Device device{torch::kCPU};
  bool tokens = false;          // language model: token metrics, else classification
  bool channels_last = false;   // model.channels_last (image inputs only)
  // train.eval_steps (0 = the whole split): batches of loader.batch_size of the evaluation in all, over
  // every rank together (the first max_batches x batch_size samples), so any world size scores the same
  int64_t max_batches = 0;
  double bytes_per_token = 0;   // token models: bits per byte need it (0 = unknown: no bpb)
  bool flip_tta = false;        // train.eval_tta flip: the logits of each image and its mirror, averaged
  // The model's output for an input batch; empty: model.forward. A pipeline run's goes through its
  // stages and gives every rank the last stage's output (engine/parallel/pipeline_parallel.hpp).
  std::function<torch::Tensor(models::Model&, const torch::Tensor&)> forward;
};

// The evaluation of a run's config on this rank (`env`: its data-parallel rank and size): the
// validation loader of run_loader_options, train.eval_steps, data.bytes_per_token. One function for
// the Trainer and `trainer eval`, so eval scores as the run did.
EvalSetup run_eval_setup(const config::RunConfig& cfg, const dist::LaunchEnv& env, Precision precision,
                         const torch::Device& device, bool tokens);

class Evaluator {
 public:
  Evaluator(std::shared_ptr<data::Dataset> val, EvalSetup setup, dist::DistContext* dist, int64_t world_size)
      : val_(std::move(val)), setup_(std::move(setup)), dist_(dist), world_size_(world_size) {}

  // The model in eval mode, no gradients, autocast as in training; the model is back in train mode after.
  EvalResult run(models::Model& model);

 private:
  EvalResult combine_ranks(EvalResult r);
  std::shared_ptr<data::Dataset> val_;
  EvalSetup setup_;
  dist::DistContext* dist_;
  int64_t world_size_;
};

}  // namespace trainer::engine
