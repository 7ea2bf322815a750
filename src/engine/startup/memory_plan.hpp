// Memory per device for one training step, and the automatic micro-batch (train.batch_size: auto).
//
//   held       parameters, optimizer state and DDP gradient buckets, which live across steps:
//              counted from the model's tensors (exact bytes, fp32 master weights)
//   step       measured: forward + backward at two small micro-batches on random inputs of the
//              real sample shape, the peak bytes ATen allocates above the step's start (CPU: a
//              counting allocator installed for the probe only; CUDA: the caching allocator's peak).
//              Activations, their gradients, workspaces and the parameter gradients (allocated during
//              backward, freed by zero_grad) all fall inside it; the two points give bytes per
//              sample and a per-step constant
//   total(b) = held + intercept + b x per_sample
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "engine/optim/precision.hpp"
#include "engine/parallel/memory_figures.hpp"
#include "models/model.hpp"

namespace trainer::engine {

struct ActivationProbe {
  int64_t b1 = 0, b2 = 0;   // micro-batches measured
  double peak1 = 0, peak2 = 0;  // bytes above the step's start at b1, b2 (parameter gradients included)
  std::string how;          // "CPU counting allocator" | "CUDA caching allocator"
  double per_sample() const { return b2 > b1 ? std::max(0.0, (peak2 - peak1) / static_cast<double>(b2 - b1)) : 0.0; }
  double intercept() const { return std::max(0.0, peak1 - per_sample() * static_cast<double>(b1)); }
  double at(int64_t b) const { return intercept() + per_sample() * static_cast<double>(b); }
};

// Forward + backward of `model` in train mode at micro-batches b1 < b2 under `precision` (autocast)
// on `device`, on random inputs: images (C, H, W) with classes = model output width, or tokens (T)
// below `vocab_or_classes`. Gradients are cleared before and after; BatchNorm running statistics and
// the global RNG move, so probe a separate model instance, not the one being trained.
// The step's peak is the larger of a batch-independent spike (parameter gradients, cast weights)
// and the batch-dependent activations, and small micro-batches fit large ones poorly; so both
// micro-batches double, up to `max_b2`, while a probe step takes under half a second and, whatever
// it costs, while the second point adds less than a quarter to the first (the spike still hides
// the activations).
ActivationProbe probe_activations(models::Model& model, const std::vector<int64_t>& sample_shape,
                                  int64_t vocab_or_classes, Precision precision, const torch::Device& device,
                                  bool channels_last, int64_t b1, int64_t b2, int64_t max_b2 = 0);

// The model as one rank of the run's mesh holds it, for measuring (its weights do not matter): at
// dist.tensor_parallel T > 1 built over a stand-in tp communicator (tensor_parallel/communicator.hpp:
// the collectives' shapes, no peers), so its parameters are one rank's slices (every rank's slices
// have the same shapes: the vocabulary is padded) and a probe step allocates what a rank's does, the
// gathered tensors included, in one process without collectives. `comm` outlives `model`.
struct ProbeModel {
  std::unique_ptr<tensor_parallel::Communicator> comm;
  models::ModelPtr model;
};
ProbeModel build_probe_model(const config::RunConfig& cfg, const torch::Device& device);

// The divisors of `per_rank` (samples per rank per optimizer step), largest first: the micro-batches
// that keep the global batch exact with a whole number of accumulation steps.
std::vector<int64_t> micro_batch_candidates(int64_t per_rank);

// The largest candidate whose estimate fixed + probe.at(b) stays within `budget_bytes`; 0 if none.
int64_t largest_fitting(const FixedMemory& fixed, const ActivationProbe& probe, double budget_bytes,
                        const std::vector<int64_t>& candidates);

// CUDA: from the estimate down, the first candidate for which `fits(b)` (a real step; false on out
// of memory) holds; 0 if none. Candidates above `start` are not tried.
int64_t search_fitting(const std::vector<int64_t>& candidates, int64_t start, const std::function<bool(int64_t)>& fits);

struct MemoryBudget {
  double bytes = 0;    // 0: unknown
  std::string source;  // for messages: where the figure comes from
};
// `configured_gb` (x 1e9) when > 0, named `configured_what`; else CUDA: 90 % of the device's memory,
// CPU: 80 % of the host's available memory divided by the local ranks.
MemoryBudget memory_budget(double configured_gb, const std::string& configured_what, const torch::Device& device,
                           int64_t local_world_size);

// MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<double> available_host_memory();

// "1.23 GiB" style.
std::string bytes_text(double bytes);

}  // namespace trainer::engine
