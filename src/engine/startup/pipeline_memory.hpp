// `trainer check --memory` with dist.pipeline_parallel P > 1: per pp rank, what it holds across steps
// and the activations its schedule keeps at its peak. The schedule decides how many microbatches a
// rank holds at once (GPipe all M on the first stage, 1F1B at most P), so the footprint is one
// microbatch's activations per stage, measured, replayed through each rank's action list.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "engine/parallel/memory_figures.hpp"

namespace trainer::engine {

struct PipelineRankMemory {
  int64_t rank = 0;             // pp coordinate
  std::vector<int64_t> stages;  // its stages
  MemoryPlan plan;              // the strategy's rows for the parameters its stages train, over its dp ranks
  int64_t untrained = 0;        // the host's transient at start-up: the largest unit of the other stages,
                                // drawn and dropped (models/partial_build.hpp)
  double activations = 0;       // the most bytes its microbatches hold at once
  int64_t in_flight = 0;        // the most microbatches it holds at once
  // across steps, the gradients of its parameters (the step's: their full size, before a sharded
  // strategy's reduction) and the activations
  double total() const {
    return static_cast<double>(plan.fixed.total() + plan.fixed.gradients) + activations;
  }
};

struct PipelineMemory {
  int64_t micro = 0;                // samples a microbatch
  int64_t microbatches = 0;         // a step's: grad_accum x dist.pipeline.microbatches
  std::vector<double> stage_bytes;  // one microbatch's activations per stage, measured
  std::vector<PipelineRankMemory> ranks;
  std::string how;                  // "CPU counting allocator" | "CUDA caching allocator"
};

// One microbatch through each stage of `c`'s plan on `device`, in a probe model as one rank of the
// mesh builds it (its tp slices at T > 1), on random inputs of `sample_shape` (a stage's input made
// by the stages before it, without gradients): the bytes held after the stage's forward (what it
// saves for backward, its output, on the last stage the loss; plus the input a later stage
// receives). Then each rank's action list is replayed: a stage's bytes are held from its forward to
// its backward (zero bubble: to the weight half). Throws std::invalid_argument without a plan.
PipelineMemory measure_pipeline_memory(const config::RunConfig& c, int64_t dp_size, const torch::Device& device,
                                       const std::vector<int64_t>& sample_shape, int64_t vocab_or_classes);

// train.batch_size auto at P > 1: the largest micro-batch b (a divisor of `per_rank`, the samples per
// rank per step, that cuts into the schedule's M(b) microbatches: dist.pipeline.microbatches, or
// auto's divisor of b) for which every pp rank's total fits `budget` bytes. One microbatch per stage
// is measured once (at the smallest such b), its bytes scaled by each b's samples per microbatch and
// replayed through the schedule of (per_rank / b) x M(b) microbatches. 0 when none fits. `at_pick`
// (optional) gets the footprint at the pick (at the smallest b when none fits).
int64_t pipeline_auto_micro_batch(const config::RunConfig& c, int64_t dp_size, int64_t per_rank, double budget,
                                  const torch::Device& device, const std::vector<int64_t>& sample_shape,
                                  int64_t vocab_or_classes, PipelineMemory* at_pick = nullptr);

// The table `trainer check --memory` prints: a column per pp rank.
void print_pipeline_memory(const PipelineMemory& m, const config::RunConfig& c, std::ostream& out);

}  // namespace trainer::engine
