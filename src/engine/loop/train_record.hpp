// The measured parts of a train record: throughput and the time split of the steps since the last
// record, host and device memory, model FLOPs utilisation. Only measured values are filled in.
// And the figures of an eval record.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "dist/dist_context.hpp"
#include "dist/launch_env.hpp"
#include "models/model.hpp"
#include "io/run_dir.hpp"
#include "obs/run_log.hpp"
#include "engine/eval/early_stopping.hpp"
#include "engine/startup/memory_plan.hpp"
#include "engine/eval/eval_metrics.hpp"
#include "engine/step/step_runner.hpp"
#include "obs/records.hpp"

namespace trainer::engine {

struct MeasureSetup {
  int64_t samples_per_step = 0;    // global samples per optimizer step
  int64_t tokens_per_sample = 0;   // block size for token models, 0 for images
  double flops_per_sample = 0;     // model training FLOPs per sample (0 = unknown)
  double peak_tflops = 0;          // per device (0 = unknown: no MFU)
  int64_t world_size = 1;
  torch::Device device{torch::kCPU};
};

// Dense peak TFLOP/s per device for MFU: log.peak_tflops when set, else the CUDA device's known
// peak for train.precision (and train.tf32); 0 when unknown (CPUs: no MFU).
double peak_tflops_for(const config::RunConfig& cfg, const torch::Device& device);

// Fills samples_per_s (tokens_per_s), step_ms and its split (comm_ms with several ranks), rss and
// peak rss, CUDA memory and GPU utilisation on CUDA, and mfu, from `times` (at least one step).
void add_measurements(obs::TrainRecord& r, const IntervalTimes& times, const MeasureSetup& m);

// The figures of an evaluation in an eval record (step, times and the best metric are the caller's);
// `ema`: the evaluation of the EMA weights (train.ema.eval), else null.
void add_eval_figures(obs::EvalRecord& rec, const EvalResult& r, const EvalResult* ema);
// The early-stopping metric's best value and step so far.
void add_best(obs::EvalRecord& rec, const EarlyStopping& tracker);

// The run log's options: metrics.jsonl and TensorBoard under the run folder, written by `primary`
// (rank 0); the progress bar on an interactive terminal.
// The hyperparameters TensorBoard's hparams dashboard shows for a run: the keys that change training
// and differ from their defaults (what the config and --set chose; keys of other model families
// left out), and always the arch, optimizer, lr, batch sizes, precision and seed. Numbers as numbers.
std::vector<obs::HParam> run_hparams(const config::RunConfig& cfg);
// The metric tags shown beside them: the validation loss, accuracy (images) or bits per byte, and the
// training loss.
std::vector<std::string> hparam_metric_tags(const config::RunConfig& cfg);

obs::RunLogOptions run_log_options(const config::LogConfig& log, bool primary, const io::RunDir& dir, int64_t total_steps);

// train.nonfinite abort: the training loss `mean` (over ranks) is not finite after `step`. Logs this
// rank's own loss when it is the non-finite one, then throws std::runtime_error with what to do.
[[noreturn]] void throw_nonfinite_loss(double mean, double local, int64_t step, const dist::LaunchEnv& env);

// The lines a run logs at start: model and data, where this rank's collectives go, the step's shape.
struct RunStart {
  const models::Model& model;
  const data::Dataset& train;
  const data::Dataset* val;  // null: no validation split
  const dist::DistContext& dist;
  const dist::LaunchEnv& env;
  const torch::Device& device;
  const config::TrainConfig& t;
  int64_t total_steps, batches_per_epoch;
  const MemoryPlan* memory = nullptr;  // the strategy's plan (DataParallel::memory_plan), logged at debug
  int64_t data_ranks = 0;  // the data-parallel ranks (world / dist.tensor_parallel); 0: the world size
};
void log_run_start(const RunStart& r);

// "done: N steps, ..." at the end of the run.
void log_done_line(const obs::SummaryRecord& s);

}  // namespace trainer::engine
