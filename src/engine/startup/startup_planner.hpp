// Start-up decisions a run measures on its machine and keeps for its whole life (resumes included)
// in <run dir>/autotune.json: train.precision auto (engine/startup/precision_auto.hpp), model.attention auto (engine/startup/autotune.hpp) and train.batch_size auto
// (engine/startup/memory_plan.hpp). Rank 0 decides and every rank takes its choice through collectives,
// never through the file, so ranks that do not share the run directory still agree.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "dist/dist_context.hpp"
#include "dist/launch_env.hpp"
#include "engine/optim/precision.hpp"
#include "engine/startup/memory_plan.hpp"
#include "io/checkpoint.hpp"

namespace trainer::engine {

struct ProcessSetup {
  torch::Device device{torch::kCPU};
  Precision precision = Precision::Fp32;
};

// The process before anything is built: host memory reuse, intra-op threads, seeds, determinism,
// the device (local rank's GPU or the CPU) and its math settings (TF32, cuDNN benchmark, cuBLAS's
// deterministic workspace). Throws when the precision is not supported on the device.
ProcessSetup configure_process(const config::RunConfig& cfg, const dist::LaunchEnv& env);

class StartupPlanner {
 public:
  // `cfg` is the run's own copy: the choices are written into it.
  StartupPlanner(config::RunConfig& cfg, const dist::LaunchEnv& env, dist::DistContext* dist, torch::Device device,
                 Precision precision, std::filesystem::path run_root)
      : cfg_(cfg), env_(env), dist_(dist), device_(device), precision_(precision), root_(std::move(run_root)) {}

  // The choices measured before the model is built, in this order: train.precision auto (at the
  // micro-batch train.batch_size, or at most 16 when that is auto too), then model.attention auto
  // when the family times it (`attention_probe`: ModelSpec::attention_probe is set; a family
  // without one decides it itself). Returns the run's precision.
  Precision resolve_model_choices(const data::Dataset& train_set, bool attention_probe);

  // train.precision auto -> fp32 | bf16 | fp16 (engine/startup/precision_auto.hpp): kept from autotune.json,
  // or decided by rank 0 (a CPU with native bf16 times a probe of the model at micro-batch `batch` of
  // train_set's samples), taken by every rank. Writes it into the config and returns it; call it first:
  // what follows (attention, micro-batch) is measured in the precision it gives.
  Precision resolve_precision(const data::Dataset& train_set, int64_t batch);

  // model.attention auto -> "sdpa" | "math" (kept from autotune.json, or timed by rank 0 through the
  // family's ModelSpec::attention_probe, which the caller checked is set).
  void resolve_attention();

  // train.batch_size auto: the largest divisor of the per-rank batch that fits this process's memory,
  // the same on every rank (the smallest choice wins); grad_accum follows, so
  // train.global_batch_size is kept. The probe runs on a separate model and restores the generators.
  void choose_micro_batch(const data::Dataset& train_set);
  void choose_pipeline_micro_batch(const data::Dataset& train_set, int64_t per_rank, int64_t dp, const MemoryBudget& mb,
                                   const nlohmann::json& key, const io::NamedTensors& rng);
  // The end of start-up: the memory it freed goes back to the kernel (device::release_free_host_memory).
  void release_startup_memory();

 private:
  std::filesystem::path autotune_file() const { return root_ / "autotune.json"; }
  nlohmann::json read_autotune() const;
  void write_autotune(const nlohmann::json& entries) const;
  bool rank0_says(bool flag);
  int64_t agree_on_smallest(const std::vector<int64_t>& candidates, int64_t mine);

  config::RunConfig& cfg_;
  const dist::LaunchEnv& env_;
  dist::DistContext* dist_;
  torch::Device device_;
  Precision precision_;
  std::filesystem::path root_;
};

}  // namespace trainer::engine
