// The records a run writes to metrics.jsonl (schema: docs/METRICS.md). Optional members are left
// out of the JSON when they were not measured: a record never carries a placeholder.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainer::obs {

struct TrainRecord {
  int64_t step = 0;       // optimizer steps done
  double epoch = 0;       // fractional epochs of the training split consumed
  double time_s = 0;      // wall seconds since training started
  int64_t samples = 0;    // global samples seen so far
  double loss = 0;        // mean training loss over the steps since the last record (all ranks)
  double lr = 0;
  double grad_norm = 0;   // global gradient norm of this step, before clipping
  std::optional<double> loss_scale;  // fp16 only
  int64_t skipped_steps = 0;         // steps skipped for inf/NaN gradients so far (fp16)
  int64_t world_size = 1;            // ranks that ran the record's last step (dist.recovery in_process changes it)
  // dist.recovery in_process, a rank lost since the last record: the ranks whose losses `loss` averages
  // (the lost ranks' losses of the interval never arrived)
  std::optional<int64_t> loss_ranks;
  double samples_per_s = 0;          // global, over the steps since the last record
  std::optional<double> tokens_per_s;  // token models: samples_per_s * block size
  double step_ms = 0, data_wait_ms = 0, compute_ms = 0, optim_ms = 0;  // per step, averaged
  std::optional<double> comm_ms;     // gradient all-reduce wait; multi-process runs only
  std::optional<double> tp_comm_ms;  // in the tensor-parallel group's collectives; dist.tensor_parallel > 1 only
  // dist.pipeline_parallel > 1: rank 0's stage waiting for its neighbours' activations and gradients,
  // per step, and that as a share of the step time (the measured bubble)
  std::optional<double> pp_wait_ms, pp_bubble;
  // dist.pipeline_parallel > 1: the most MiB rank 0's microbatches held at once so far (activations
  // kept for backward, messages, gradients between stages), sampled between the schedule's actions
  std::optional<double> pp_act_peak_mb;
  std::optional<double> rss_mb, peak_rss_mb;
  std::optional<double> cuda_allocated_mb, cuda_reserved_mb, cuda_peak_allocated_mb;
  std::optional<double> gpu_util_pct;  // NVML: percent of the last sample period a kernel ran
  std::optional<double> mfu;         // model FLOPs utilisation in [0, 1]
  // Bytes rank 0 holds for parameters, gradients (with the strategy's buffers) and optimizer state,
  // measured from the tensors after the log step's backward (dist.sharding shrinks them).
  std::optional<int64_t> param_bytes, grad_bytes, optim_state_bytes;
};

struct EvalRecord {
  int64_t step = 0;
  double epoch = 0;
  double time_s = 0;
  double loss = 0;
  int64_t count = 0;  // samples (images) or tokens scored
  std::optional<double> accuracy, top5, ppl, bpb;
  // train.ema.eval: the same figures of the EMA weights on the same batches
  std::optional<double> ema_loss, ema_accuracy, ema_top5, ema_ppl, ema_bpb;
  // train.eval_tta flip: the live weights' figures on each image and its mirror, logits averaged
  std::optional<double> tta_loss, tta_accuracy, tta_top5;
  double eval_ms = 0;
  std::string best_metric;     // the tracked metric (early_stopping.metric, or loss/accuracy)
  double best_value = 0;
  int64_t best_step = 0;
};

// Written at the start of every attempt: a fresh run is attempt 1, each resume adds one.
struct AttemptRecord {
  int64_t attempt = 1;
  int64_t start_step = 0;          // optimizer steps already done (the checkpoint's step)
  double time_s = 0;               // the run's training clock at the start (the checkpoint's time_s)
  std::optional<std::string> resumed_from;  // the checkpoint folder; absent for a fresh start
  int64_t world_size = 1;          // the ranks this attempt started with
  std::string checkpoint_dir;      // where this attempt saves its checkpoints (absolute; "" unknown)
};

// dist.recovery in_process: the group changed size before step `step` + 1 ran (a member lost and the
// survivors regrouped, or replacements admitted). The report marks and lists them.
struct WorldRecord {
  int64_t step = 0;            // optimizer steps committed when the group changed
  int64_t world_size = 1;      // ranks from then on
  int64_t previous_world_size = 1;
  std::string reason;          // "lost member(s) 2", "replacement(s) joined"
};

struct SummaryRecord {
  int64_t steps = 0;
  double epochs = 0;
  int64_t samples = 0;
  double wall_s = 0;          // wall seconds of all attempts, as measured (see obs/history.hpp)
  int64_t attempts = 1;
  double attempt_wall_s = 0;  // wall seconds of this attempt alone
  std::string stop_reason;  // "max_steps" | "epochs" | "early_stopping"
  std::string best_metric;
  std::optional<double> best_value;
  std::optional<int64_t> best_step;
  int64_t num_parameters = 0;
  int64_t world_size = 1;
  std::string device;
  std::string precision;
};

nlohmann::json to_json(const TrainRecord& r);    // {"kind": "train", ...}
nlohmann::json to_json(const EvalRecord& r);     // {"kind": "eval", ...}
nlohmann::json to_json(const SummaryRecord& r);  // {"kind": "summary", ...}
nlohmann::json to_json(const AttemptRecord& r);  // {"kind": "attempt", ...}
nlohmann::json to_json(const WorldRecord& r);    // {"kind": "world", ...}

// The scalars of a record for TensorBoard: (tag, value), e.g. ("train/loss", 2.3).
std::vector<std::pair<std::string, double>> scalars(const TrainRecord& r);
std::vector<std::pair<std::string, double>> scalars(const EvalRecord& r);

}  // namespace trainer::obs
