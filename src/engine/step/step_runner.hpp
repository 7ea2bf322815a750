// One optimizer step of a run, eager or through a CUDA graph (train.cuda_graphs): grad_accum
// micro-batches forward/backward, the gradient sync, unscale, clip, the optimizer step and the
// loss-scale update. The runner keeps the interval's training loss on the device until a log step
// asks for it, and counts the steps the fp16 scaler skipped.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/loader.hpp"
#include "engine/step/batch_mix.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "engine/parallel/pipeline_parallel.hpp"
#include "engine/step/graphed_step.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "engine/optim/precision.hpp"
#include "models/model.hpp"

namespace trainer::engine {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Host time spent per phase since the last record. On CPU the ops run synchronously, so these are
// the phases' real durations; on CUDA they are host-timeline durations (see docs/METRICS.md).
struct IntervalTimes {
  int64_t steps = 0;
  double data_ms = 0, compute_ms = 0, comm_ms = 0, optim_ms = 0;
  Clock::time_point start = Clock::now();
  std::optional<DataParallel::HeldBytes> held;  // measured on the last log step (need_norm)
};

struct StepOutcome {
  torch::Tensor grad_norm;  // before clipping (on the device) when computed, else undefined
  bool nonfinite = false;   // train.nonfinite skip|rollback: the step was skipped
};

// "nan", "inf", "-inf" or the number (a NaN's sign bit means nothing to a user).
std::string number_text(double v);

// What a step works on: the run's objects, which outlive the runner.
struct StepParts {
  models::Model& model;
  const std::vector<torch::Tensor>& params;  // unique parameters
  data::DataLoader& loader;
  torch::optim::Optimizer& optimizer;
  LossScaler& scaler;
  std::function<double(int64_t)> lr_at;      // the schedule (replaced when a resume changes the total)
  DataParallel& parallel;                    // the data-parallel strategy (a no-op for one process)
  PipelineStages* pipeline = nullptr;        // dist.pipeline_parallel > 1: the step runs through the stages
};

struct StepSettings {
  int64_t grad_accum = 1;
  double grad_clip = 0;
  config::NonFinite nonfinite = config::NonFinite::Abort;  // train.nonfinite
  Precision precision = Precision::Fp32;
  torch::Device device{torch::kCPU};
  bool tokens = false;              // token inputs (else images)
  bool channels_last = false;       // image inputs channels-last
  int64_t rank = 0;                 // this process's rank (logs, fault injection)
  int64_t data_rank = 0;            // its data-parallel coordinate: the mixer's draws (a tp group's or a
                                    // pipeline's ranks mix the same batch the same way)
  int64_t data_world = 1;           // the data-parallel ranks: with data_rank, a micro-batch's place in
                                    // the global batch (its dropout streams, models/unit_rng.hpp)
  double label_smoothing = 0;       // train.label_smoothing (the training loss only)
  config::MixupConfig mixup;        // data.mixup / data.cutmix (image models; off by default)
  config::CutmixConfig cutmix;
  int64_t num_classes = 0;          // the soft targets' width when mixing
  int64_t seed = 0;                 // run.seed: the mixer's draws
};

// The step settings of a run's config; `grad_accum`, `rank` and `data_rank` are the current world's
// (an in-process regroup changes them).
StepSettings run_step_settings(const config::RunConfig& cfg, Precision precision, const torch::Device& device,
                               bool tokens, int64_t grad_accum, int64_t rank, int64_t data_rank,
                               int64_t data_world);

class StepRunner {
 public:
  // Reads TRAINER_INJECT_NONFINITE_GRAD (fault injection; see the .cpp).
  StepRunner(StepParts parts, StepSettings settings);

  // train.cuda_graphs: a GraphedStep when `c` allows one, else the reason in the log and eager steps.
  void enable_graphs(GraphConditions c);
  bool graphed() const { return graph_ != nullptr; }

  // One optimizer step (`step` steps done before it). No host synchronisation unless fp16 (the
  // scaler's skip decision), `need_norm`, or train.nonfinite skip|rollback (the finiteness check).
  StepOutcome run(int64_t step, bool need_norm, IntervalTimes& times);

  // The training loss summed over the steps since the last reset (on the device; undefined when
  // none) and the micro-batches in it. A skipped step's loss stays out.
  const torch::Tensor& loss_sum() const { return loss_sum_; }
  int64_t loss_count() const { return loss_count_; }
  void reset_loss() {
    loss_sum_ = torch::Tensor();
    loss_count_ = 0;
    carried_ = {};
  }
  int64_t skipped_steps() const { return skipped_steps_; }  // steps the fp16 scaler skipped so far
  // What a runner rebuilt after an in-process regroup takes over from the one it replaces: the
  // interval's loss (not yet logged) and the skip count.
  // `carried`: the steps of an interval saved at another world size, as their mean micro-batch loss:
  // counted at the first step here, as that many steps of this world's micro-batches (its
  // accumulation may differ: a count of the saved world's micro-batches would weigh them wrongly).
  struct Carried {
    double mean = 0;
    int64_t steps = 0;
  };
  // `per_step`: the micro-batches each step counted in loss_count added (0: unknown). A sum put back
  // from a checkpoint of the same ranks counted in another number per step (another accumulation,
  // pipeline microbatches or layout) is taken at the first step here as its steps of this run's
  // micro-batches at their mean: a raw count would weigh the saved steps wrongly.
  struct Interval {
    torch::Tensor loss_sum;
    int64_t loss_count = 0, skipped_steps = 0;
    Carried carried;
    int64_t per_step = 0;
  };
  Interval interval() const { return {loss_sum_, loss_count_, skipped_steps_, carried_, per_step_}; }
  void take_over(const Interval& i) {
    loss_sum_ = i.loss_sum;
    loss_count_ = i.loss_count;
    skipped_steps_ = i.skipped_steps;
    carried_ = i.carried;
    per_step_ = i.per_step;
  }

 private:
  torch::Tensor to_device(const torch::Tensor& t, bool image_input) const;
  // Batch `micro` of the step after `step` steps on the model's device, mixed when mixup / CutMix is on.
  std::pair<torch::Tensor, torch::Tensor> device_batch(const data::Batch& batch, int64_t step, int64_t micro) const;
  void fail_read_if_injected(int64_t step, int64_t micro);
  StepTensors graph_body(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets);
  std::optional<StepOutcome> graphed_train_step(int64_t step, bool need_norm, IntervalTimes& times,
                                                std::vector<data::Batch>& taken);
  // Pipeline parallel: the step's batches through the stages (forward and backward of every
  // microbatch); returns the sum of the microbatch losses on every rank.
  PipelineStages::StepLoss pipeline_forward_backward(int64_t step, IntervalTimes& times);

  StepParts parts_;
  StepSettings set_;
  std::unique_ptr<GraphedStep> graph_;  // train.cuda_graphs, when the run can use it
  std::optional<BatchMixer> mixer_;     // data.mixup / data.cutmix, when on
  int64_t steps_in_process_ = 0;         // run() calls so far (the graph's warm-up counts them)
  bool warned_graph_shape_ = false;
  // one step's loss summed over its `micro_batches` into the interval (and a carried interval's steps)
  void add_loss(const torch::Tensor& loss, int64_t micro_batches);
  torch::Tensor loss_sum_;
  int64_t loss_count_ = 0, skipped_steps_ = 0;
  Carried carried_;
  int64_t per_step_ = 0;
  std::multiset<int64_t> inject_nonfinite_;  // TRAINER_INJECT_NONFINITE_GRAD
  int64_t inject_read_failure_ = -1;          // TRAINER_INJECT_READ_FAILURE: the step (1-based) of this rank
};

}  // namespace trainer::engine
