// What a data-parallel strategy holds per rank across steps, in bytes: the figures the strategies
// report through the DataParallel seam (data_parallel.hpp: strategy_memory_plan) and the rows
// `trainer check --memory` prints. The measured part of a step and the micro-batch choice are
// startup/memory_plan's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "models/model.hpp"

namespace trainer::engine {

struct FixedMemory {
  int64_t parameters = 0, gradients = 0, optimizer = 0, ddp_buckets = 0;
  int64_t gathered = 0;  // dist.sharding full: the units' parameters gathered whole at a time
  // what lives across steps; the gradients are part of the measured step (see above)
  int64_t total() const { return parameters + optimizer + ddp_buckets + gathered; }
};

// One line of the strategy's memory plan, named as the strategy names it (`trainer check --memory`).
struct MemoryRow {
  std::string label;
  int64_t bytes = 0;
};

// What a data-parallel strategy holds per rank: the figures (what train.batch_size auto adds up) and
// the rows `trainer check --memory` prints, in order. Each strategy makes its own
// (engine/data_parallel.hpp: strategy_memory_plan).
struct MemoryPlan {
  FixedMemory fixed;
  std::vector<MemoryRow> rows;
};

// A world of one's figures, from the model's unique trainable parameters: gradients as large as the
// parameters, AdamW two state tensors per parameter, SGD one momentum buffer (none without momentum).
// The strategies start from these.
FixedMemory counted_memory(const models::Model& model, const config::OptimConfig& optim);

// The strategy's figures (strategy_memory_plan(...).fixed): with world_size > 1 the flat all-reduce
// buckets (one copy of the gradients); dist.sharding optimizer | gradients: optimizer state / N;
// gradients also the buckets / N; full: parameters / N too, plus the units gathered whole at one
// time: the first (GPT's tied embeddings) and twice the largest of the others (running + prefetched).
FixedMemory fixed_memory(const models::Model& model, const config::OptimConfig& optim, int64_t world_size,
                         config::Sharding sharding = config::Sharding::None);

// Bytes of the trainable parameters of each of the model's units (Model::units()), in their order.
std::vector<int64_t> unit_param_bytes(const models::Model& model);

}  // namespace trainer::engine
