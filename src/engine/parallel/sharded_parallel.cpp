#include "engine/parallel/sharded_parallel.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "engine/parallel/memory_figures.hpp"
#include "engine/optim/optim.hpp"
#include "engine/parallel/sharded_checkpoint.hpp"

namespace trainer::engine {

namespace {

// The model's gate into ShardSync's full mode.
class ShardGate final : public models::UnitGate {
 public:
  explicit ShardGate(dist::ShardSync& sync) : sync_(sync) {}
  void enter(size_t unit) override { sync_.unit_enter(unit); }
  torch::Tensor leave(size_t unit, torch::Tensor y) override { return sync_.unit_leave(unit, std::move(y)); }

 private:
  dist::ShardSync& sync_;
};

// Each unit's trainable parameters, as indices into `params`, in the model's unit order.
std::vector<std::vector<size_t>> unit_groups(const models::Model& model, const std::vector<torch::Tensor>& params) {
  std::unordered_map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].unsafeGetTensorImpl()] = i;
  const auto units = model.units();
  std::vector<std::vector<size_t>> groups(units.size());
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    auto it = index.find(item.value().unsafeGetTensorImpl());
    if (it == index.end()) continue;  // frozen: stays replicated
    const int64_t u = models::unit_of(units, item.key());
    if (u < 0)
      throw std::invalid_argument("dist.sharding full: parameter " + item.key() + " is in none of the model's units");
    groups[static_cast<size_t>(u)].push_back(it->second);
  }
  return groups;
}

}  // namespace

ShardedParallel::ShardedParallel(dist::DistContext& world, dist::Group& dp, const config::DistConfig& cfg)
    : world_(world), dp_(dp), cfg_(cfg) {}

ShardedParallel::~ShardedParallel() {
  if (auto m = model_.lock())
    if (auto* model = dynamic_cast<models::Model*>(m.get()); model && model->unit_gate() == gate_.get())
      model->set_unit_gate(nullptr);
}

std::string ShardedParallel::name() const {
  switch (cfg_.sharding) {
    case config::Sharding::Optimizer: return "sharded optimizer state (ZeRO-1)";
    case config::Sharding::Gradients: return "sharded gradients (ZeRO-2)";
    default: return "fully sharded parameters, gradients and optimizer state (ZeRO-3)";
  }
}

void ShardedParallel::align_pieces(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) aligned_.insert(p.unsafeGetTensorImpl());
}

void ShardedParallel::prepare(torch::nn::Module& model, const std::vector<torch::Tensor>& params) {
  dp_.broadcast_module(model);  // dp rank 0's weights before they move into the buckets
  if (cfg_.sharding == config::Sharding::Full) {
    auto* m = dynamic_cast<models::Model*>(&model);
    if (!m || !m->gates_units())
      throw std::invalid_argument("dist.sharding full: this model's forward does not gather its units (Model::enter_unit / "
                                  "leave_unit); use dist.sharding: gradients");
    sync_ = std::make_unique<dist::ShardSync>(dp_, params, cfg_.bucket_mb, dist::ShardSync::Grads::Full,
                                              unit_groups(*m, params), aligned_);
    gate_ = std::make_unique<ShardGate>(*sync_);
    m->set_unit_gate(gate_.get());
    model_ = m->weak_from_this();
  } else {
    const auto mode = cfg_.sharding == config::Sharding::Optimizer ? dist::ShardSync::Grads::AllReduce
                                                                   : dist::ShardSync::Grads::ReduceScatter;
    sync_ = std::make_unique<dist::ShardSync>(dp_, params, cfg_.bucket_mb, mode, std::vector<std::vector<size_t>>{},
                                              aligned_);
  }
  pieces_ = sync_->piece_values();
  checkpoint_ = std::make_unique<ShardedCheckpoint>(*sync_, dp_);  // shard r of the dp group
  int64_t owned = 0, padded = 0;
  for (const auto& pc : sync_->pieces()) owned += pc.len;
  for (const auto& b : sync_->buckets()) padded += b.padded;
  spdlog::info("dist.sharding {}: {}; {} buckets, {} elements with padding, this rank steps {} of them",
               config::name_of(cfg_.sharding),
               name(), sync_->buckets().size(), padded, owned);
}

void ShardedParallel::before_backward(bool last_micro_batch) {
  if (sync_->full() && peak_state_ == 0) {  // measured from the first step's first forward on
    sync_->reset_peak();
    peak_state_ = 1;
  }
  sync_->set_enabled(last_micro_batch);
}

// full: after the first step, what it gathered at most at one time (the check of "one unit at a time")
void ShardedParallel::after_backward() {
  sync_->finish();
  if (peak_state_ != 1) return;
  peak_state_ = 2;
  int64_t largest = 0, all = 0;
  for (const auto& b : sync_->buckets()) {
    const int64_t bytes = b.padded * static_cast<int64_t>(b.flat_param.element_size());
    largest = std::max(largest, bytes), all += bytes;
  }
  const auto peak = sync_->gather_peak();
  spdlog::info("dist.sharding full: the first step gathered at most {} of {} units at once, {} bytes of the model's {} "
               "(largest unit {} bytes)",
               peak.units, sync_->buckets().size(), peak.bytes, all, largest);
}

// The whole model's groups (decay split, optim.groups, layer decay: engine/optim/param_groups), each
// applied to the pieces of its parameters that this rank steps; every rank keeps every group (some
// empty), so the groups' learning rates and the checkpoint layout agree across ranks.
std::unique_ptr<torch::optim::Optimizer> ShardedParallel::make_optimizer(const config::OptimConfig& cfg,
                                                                         const torch::nn::Module& model) {
  auto plans = plan_param_groups(cfg, model);
  std::unordered_map<const c10::TensorImpl*, size_t> group_of;
  for (size_t g = 0; g < plans.size(); ++g)
    for (const auto& p : plans[g].params) group_of[p.unsafeGetTensorImpl()] = g;
  for (auto& g : plans) g.params.clear(), g.names.clear();
  for (const auto& pc : sync_->pieces()) {
    auto it = group_of.find(sync_->params()[pc.param].unsafeGetTensorImpl());
    if (it != group_of.end()) plans[it->second].params.push_back(pc.value);
  }
  return build_optimizer(cfg, plans);
}

std::vector<torch::Tensor> ShardedParallel::step_param_sources(const std::vector<torch::Tensor>&) const {
  std::vector<torch::Tensor> out;
  for (const auto& pc : sync_->pieces()) out.push_back(sync_->params()[pc.param]);
  return out;
}

torch::Tensor ShardedParallel::clip_grad_norm(const std::vector<torch::Tensor>& step_params, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : step_params)
    if (p.grad().defined()) grads.push_back(p.grad());
  // sum of squares in float64 over this rank's slices, then over the dp group: the norm of the whole
  // (TP-local) gradient
  auto sq = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(dp_.device()));
  if (!grads.empty()) sq += torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat64).pow(2).sum();
  dp_.all_reduce_sum_async(sq, "grad norm")->wait();
  auto total = sq.sqrt().to(torch::kFloat32).reshape({});
  if (max_norm > 0 && !grads.empty()) {
    auto coef = (max_norm / (total + 1e-6)).clamp_max(1.0);  // torch's clip_grad_norm_ rule, on the device
    at::_foreach_mul_(grads, coef.to(grads.front().dtype()));
  }
  return total;
}

// the whole world, not the dp group: tp peers must skip the same steps too
void ShardedParallel::agree_flag(torch::Tensor& flag) { world_.all_reduce_sum_async(flag, "found inf")->wait(); }

DataParallel::HeldBytes ShardedParallel::held_bytes(const std::vector<torch::Tensor>&,
                                                    const torch::optim::Optimizer& opt) const {
  HeldBytes h;
  h.params = sync_->param_bytes();
  h.grads = sync_->grad_bytes();
  h.optimizer = optimizer_state_bytes(opt);
  return h;
}

const CheckpointPart& ShardedParallel::checkpoint_part() const {
  if (!checkpoint_) throw std::logic_error("ShardedParallel::checkpoint_part before prepare");
  return *checkpoint_;
}

MemoryPlan ShardedParallel::plan_memory(config::Sharding sharding, int64_t world, const models::Model& model,
                                        const config::OptimConfig& optim) {
  MemoryPlan plan;
  auto& m = plan.fixed;
  m = counted_memory(model, optim);
  // each rank keeps optimizer state for its 1/N (rounded up: the padding of the last chunk)
  auto share = [&](int64_t bytes) { return (bytes + world - 1) / world; };
  m.optimizer = share(m.optimizer);
  m.ddp_buckets = sharding == config::Sharding::Optimizer ? m.gradients : share(m.gradients);
  const bool full = sharding == config::Sharding::Full;
  if (full) {
    // the parameters' slice, and whole: the first unit (GPT's embeddings, tied to lm_head, stay
    // gathered from the first forward to the end of backward) plus two of the others (the one running
    // and the prefetched one); a unit's gradients exist whole only until its reduce-scatter, so the
    // step holds the largest unit's
    m.parameters = share(m.parameters);
    const auto units = unit_param_bytes(model);
    const int64_t others = units.size() > 1 ? *std::max_element(units.begin() + 1, units.end()) : 0;
    m.gathered = (units.empty() ? 0 : units.front()) + 2 * others;
    m.gradients = units.empty() ? 0 : *std::max_element(units.begin(), units.end());
  }
  const std::string each = "1/" + std::to_string(world) + " each";
  plan.rows.push_back({full ? "parameters (" + each + ")" : "parameters", m.parameters});
  if (full) plan.rows.push_back({"gathered units (first + 2 x largest)", m.gathered});
  plan.rows.push_back({"gradients (inside the step)", m.gradients});
  plan.rows.push_back({"optimizer state (" + config::name_of(optim.name) + ", " + each + ")", m.optimizer});
  const char* buckets = sharding == config::Sharding::Optimizer   ? "DDP gradient buckets"
                        : sharding == config::Sharding::Gradients ? "gradient shard (ZeRO-2)"
                                                                  : "gradient shard (ZeRO-3)";
  plan.rows.push_back({buckets, m.ddp_buckets});
  return plan;
}

std::unique_ptr<DataParallel> make_sharded_parallel(dist::DistContext& world, dist::Group& dp,
                                                    const config::DistConfig& cfg) {
  return std::make_unique<ShardedParallel>(world, dp, cfg);
}

}  // namespace trainer::engine
