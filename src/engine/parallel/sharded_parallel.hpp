// The sharded data-parallel strategies of dist.sharding, behind the DataParallel seam:
//   optimizer (ZeRO-1): gradients all-reduced as in DDP; each rank keeps optimizer state for, and
//                       steps, only its 1/N of every bucket (dist/shard_sync.hpp), then the updated
//                       parameters are all-gathered;
//   gradients (ZeRO-2): the same, but gradients are reduce-scattered bucket by bucket during
//                       backward and each rank keeps only its slice.
//   full (ZeRO-3):      the parameters too live sharded, one bucket per unit of the model
//                       (Model::units(): embeddings, each block or stage, head); the model's forward
//                       gathers each unit through a models::UnitGate (ShardGate) just before it runs
//                       and frees it after, backward gathers it again, reduce-scatters its gradients
//                       as soon as they are in, and the next unit's all-gather is prefetched.
//                       Frozen parameters (train.freeze) stay replicated: they have no gradient and
//                       no optimizer state, and a frozen unit needs no re-gather.
// Over the dp group (data_parallel.hpp says which collectives are the dp group's and which the
// world's): the shards are its ranks', the global gradient norm (clipping) sums their squared slice
// norms; the fp16 overflow flag is summed over the whole world so every rank skips the same steps.
#pragma once

#include <memory>

#include "config/config.hpp"
#include "dist/dist_context.hpp"
#include "dist/shard_sync.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "models/model.hpp"

namespace trainer::engine {

class ShardedParallel final : public DataParallel {
 public:
  ShardedParallel(dist::DistContext& world, dist::Group& dp, const config::DistConfig& cfg);
  ~ShardedParallel() override;  // takes its gate off the model
  std::string name() const override;
  void align_pieces(const std::vector<torch::Tensor>& params) override;
  void prepare(torch::nn::Module& model, const std::vector<torch::Tensor>& params) override;
  void before_backward(bool last_micro_batch) override;
  void after_backward() override;
  std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimConfig& cfg,
                                                          const torch::nn::Module& model) override;
  const std::vector<torch::Tensor>& step_params(const std::vector<torch::Tensor>&) const override {
    return pieces_;
  }
  std::vector<torch::Tensor> step_param_sources(const std::vector<torch::Tensor>&) const override;
  bool shards_gradients() const override { return true; }
  void sync_buffers(torch::nn::Module& model) override { dp_.broadcast_module(model, /*buffers_only=*/true); }
  torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& step_params, double max_norm) override;
  void agree_flag(torch::Tensor& flag) override;
  void after_step() override { sync_->gather_params(); }
  void hold_full_params() const override { sync_->gather_all(); }
  void release_full_params(bool written) const override { sync_->release_all(written); }
  HeldBytes held_bytes(const std::vector<torch::Tensor>& params, const torch::optim::Optimizer& opt) const override;

  MemoryPlan memory_plan(const models::Model& model, const config::OptimConfig& optim) const override {
    return plan_memory(cfg_.sharding, dp_.size(), model, optim);
  }
  const CheckpointPart& checkpoint_part() const override;  // the shard files (sharded_checkpoint.hpp)

  // What `sharding` holds per rank over `world` (> 1) dp ranks (memory_plan.hpp's FixedMemory): the
  // optimizer state's 1/N; ZeRO-2 and 3 only their gradient slice across steps (ZeRO-1 the full
  // all-reduce buckets); ZeRO-3 the parameters' 1/N plus the units gathered whole at one time.
  static MemoryPlan plan_memory(config::Sharding sharding, int64_t world, const models::Model& model,
                                const config::OptimConfig& optim);

 private:
  dist::DistContext& world_;
  dist::Group& dp_;
  config::DistConfig cfg_;
  std::unique_ptr<dist::ShardSync> sync_;
  dist::ShardSync::Aligned aligned_;  // align_pieces: handed to the sync in prepare
  std::vector<torch::Tensor> pieces_;  // what the optimizer steps: views into the owned chunks
  std::unique_ptr<CheckpointPart> checkpoint_;  // made with the sync, in prepare
  std::unique_ptr<models::UnitGate> gate_;  // full: what the model's forward calls
  std::weak_ptr<torch::nn::Module> model_;  // full: the model the gate is set on
  int peak_state_ = 0;  // full: 0 before the first step, 1 during it, 2 once its gather peak is logged
};

std::unique_ptr<DataParallel> make_sharded_parallel(dist::DistContext& world, dist::Group& dp,
                                                    const config::DistConfig& cfg);

}  // namespace trainer::engine
