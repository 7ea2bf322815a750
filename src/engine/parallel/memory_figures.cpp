#include "engine/parallel/memory_figures.hpp"

#include "engine/optim/optim.hpp"
#include "engine/parallel/data_parallel.hpp"

namespace trainer::engine {
namespace {

int64_t tensor_bytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

}  // namespace

FixedMemory counted_memory(const models::Model& model, const config::OptimConfig& optim) {
  FixedMemory m;
  for (const auto& p : unique_parameters(model)) m.parameters += tensor_bytes(p);
  m.gradients = m.parameters;
  if (optim.name == config::OptimizerKind::Adamw) m.optimizer = 2 * m.parameters;
  else if (optim.momentum != 0) m.optimizer = m.parameters;
  return m;
}

FixedMemory fixed_memory(const models::Model& model, const config::OptimConfig& optim, int64_t world_size,
                         config::Sharding sharding) {
  config::DistConfig d;
  d.sharding = sharding;
  return strategy_memory_plan(d, world_size, model, optim).fixed;
}

std::vector<int64_t> unit_param_bytes(const models::Model& model) {
  const auto units = model.units();
  std::vector<int64_t> bytes(units.size(), 0);
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;  // frozen: replicated, not gathered
    if (const int64_t u = models::unit_of(units, item.key()); u >= 0) bytes[static_cast<size_t>(u)] += tensor_bytes(item.value());
  }
  return bytes;
}

}  // namespace trainer::engine
