#include "engine/parallel/data_parallel.hpp"

#include <spdlog/spdlog.h>

#include <unordered_set>

#include "dist/grad_sync.hpp"
#include "engine/optim/grad_clip.hpp"
#include "engine/optim/optim.hpp"
#include "engine/optim/optim_state.hpp"
#include "engine/parallel/sharded_parallel.hpp"
#include "engine/optim/train_state.hpp"

namespace trainer::engine {

FullParams::~FullParams() {
  if (!parallel_) return;
  try {
    parallel_->release_full_params(write_);
  } catch (const std::exception& e) {
    spdlog::error("releasing the gathered parameters failed: {}", e.what());
  }
}

std::unique_ptr<torch::optim::Optimizer> DataParallel::make_optimizer(const config::OptimConfig& cfg,
                                                                      const torch::nn::Module& model) {
  return build_optimizer(cfg, model);
}

void CheckpointPart::load_optimizer(torch::optim::Optimizer& opt, const torch::nn::Module& model,
                                    const io::NamedTensors& full) const {
  load_optimizer_state(opt, model, full);
}

io::NamedTensors CheckpointPart::whole_optimizer_state(const torch::optim::Optimizer& opt,
                                                      const torch::nn::Module& model) const {
  return optimizer_state_tensors(opt, model);
}

const CheckpointPart& replicated_checkpoint_part() {
  static const CheckpointPart part;
  return part;
}

torch::Tensor DataParallel::clip_grad_norm(const std::vector<torch::Tensor>& step_params, double max_norm) {
  return engine::clip_grad_norm(step_params, max_norm);
}

namespace {
int64_t unique_bytes(const std::vector<torch::Tensor>& ts, std::unordered_set<const void*>& seen) {
  int64_t n = 0;
  for (const auto& t : ts)
    if (t.defined() && seen.insert(t.storage().data()).second) n += static_cast<int64_t>(t.storage().nbytes());
  return n;
}
}  // namespace

int64_t optimizer_state_bytes(const torch::optim::Optimizer& opt) {
  std::vector<torch::Tensor> ts;
  for (const auto& [key, st] : opt.state())
    visit_state_tensors(*st, [&](const char*, const torch::Tensor& t) { ts.push_back(t); });
  std::unordered_set<const void*> seen;
  return unique_bytes(ts, seen);
}

DataParallel::HeldBytes DataParallel::held_bytes(const std::vector<torch::Tensor>& params,
                                                 const torch::optim::Optimizer& opt) const {
  HeldBytes h;
  std::unordered_set<const void*> seen;
  h.params = unique_bytes(params, seen);
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  h.grads = unique_bytes(grads, seen) + extra_grad_bytes();
  h.optimizer = optimizer_state_bytes(opt);
  return h;
}

namespace {

// Every rank holds everything; with several ranks the gradient buckets too (one copy of the gradients).
MemoryPlan replicated_memory_plan(const models::Model& model, const config::OptimConfig& optim, int64_t world) {
  MemoryPlan plan;
  auto& m = plan.fixed;
  m = counted_memory(model, optim);
  if (world > 1) m.ddp_buckets = m.gradients;
  plan.rows = {{"parameters", m.parameters},
               {"gradients (inside the step)", m.gradients},
               {"optimizer state (" + config::name_of(optim.name) + ")", m.optimizer},
               {"DDP gradient buckets", m.ddp_buckets}};
  return plan;
}

class SingleProcess final : public DataParallel {
 public:
  std::string name() const override { return "single process"; }
  MemoryPlan memory_plan(const models::Model& model, const config::OptimConfig& optim) const override {
    return replicated_memory_plan(model, optim, 1);
  }
  void prepare(torch::nn::Module&, const std::vector<torch::Tensor>&) override {}
  void before_backward(bool) override {}
  void after_backward() override {}
};

// Every rank holds the whole model (its TP-local part) and optimizer state; gradients are averaged
// over the dp group by GradSync.
class Replicated final : public DataParallel {
 public:
  Replicated(dist::DistContext& world, dist::Group& dp, double bucket_mb)
      : world_(world), dp_(dp), bucket_mb_(bucket_mb) {}
  std::string name() const override {
    if (dp_.size() == world_.world_size()) return "replicated (DDP)";
    if (!dp_.active()) return "no data parallelism (a dp group of one rank)";
    return "replicated (DDP) over dp groups of " + std::to_string(dp_.size()) + " ranks";
  }
  void prepare(torch::nn::Module& model, const std::vector<torch::Tensor>& params) override {
    dp_.broadcast_module(model);
    // a dp group of one (tensor parallel over the whole world) has nothing to average: no bucket
    // buffers (a copy of the gradients), no hook
    if (dp_.active()) sync_ = std::make_unique<dist::GradSync>(dp_, params, bucket_mb_);
  }
  // gradients sync only on the last micro-batch: earlier ones accumulate locally (no_sync)
  void before_backward(bool last_micro_batch) override {
    if (sync_) sync_->set_enabled(last_micro_batch);
  }
  void after_backward() override {  // waits for the buckets launched during backward
    if (sync_) sync_->finish();
  }
  void commit(int64_t step) override { world_.commit_step(step); }
  void sync_buffers(torch::nn::Module& model) override { dp_.broadcast_module(model, /*buffers_only=*/true); }
  // tp peers see different gradients: the world agrees (with T = 1 the dp group is the world: nothing)
  void agree_flag(torch::Tensor& flag) override {
    if (dp_.size() != world_.world_size()) world_.all_reduce_sum_async(flag, "found inf")->wait();
  }
  MemoryPlan memory_plan(const models::Model& model, const config::OptimConfig& optim) const override {
    return replicated_memory_plan(model, optim, dp_.size());
  }
  int64_t extra_grad_bytes() const override {  // the bucket buffers the all-reduce runs on
    int64_t n = 0;
    if (sync_)
      for (const auto& b : sync_->buckets()) n += b.flat.nbytes();
    return n;
  }

 private:
  dist::DistContext& world_;
  dist::Group& dp_;
  double bucket_mb_;
  std::unique_ptr<dist::GradSync> sync_;
};

}  // namespace

std::unique_ptr<DataParallel> make_data_parallel(dist::DistContext& world, dist::Group& dp,
                                                 const config::DistConfig& cfg) {
  if (!world.active()) return std::make_unique<SingleProcess>();
  using config::Sharding;
  // optimizer | gradients | full; a dp group of one has nothing to shard
  if (cfg.sharding != Sharding::None && dp.active()) return make_sharded_parallel(world, dp, cfg);
  return std::make_unique<Replicated>(world, dp, cfg.bucket_mb);
}

MemoryPlan strategy_memory_plan(const config::DistConfig& cfg, int64_t dp_size, const models::Model& model,
                                const config::OptimConfig& optim) {
  if (dp_size > 1 && cfg.sharding != config::Sharding::None)
    return ShardedParallel::plan_memory(cfg.sharding, dp_size, model, optim);
  return replicated_memory_plan(model, optim, dp_size);  // a single process (or dp rank) shards nothing
}

}  // namespace trainer::engine
