// The run's tensor-parallel parts (tp_run.hpp).
#include "engine/loop/tp_run.hpp"

#include <spdlog/spdlog.h>

#include <set>
#include <stdexcept>

#include "dist/dist_context.hpp"
#include "engine/optim/grad_clip.hpp"
#include "tensor_parallel/sharding.hpp"

namespace trainer::engine {
namespace {

namespace tpl = tensor_parallel;

// The strategy of a tensor-parallel run: the data-parallel strategy over the mesh's dp group (the
// replicas are the dp ranks of one tp coordinate, their parameters this rank's TP slices), plus what
// the tp group needs after backward. The inner strategy averages the gradients over dp; then the
// partial gradients of sequence parallel are summed over tp (both linear: the order does not matter);
// the norm is the mesh's (after the dp mean every dp replica holds the same gradients, so the tp
// group's sum of the sharded squares plus the replicated ones once is the global norm); the fp16
// overflow vote is the whole world's (tp peers see other gradients). At dp 1 the inner strategy is
// over a group of one: no dp collective, no hook. Replicated only: a sharded inner strategy steps
// pieces of the slices, whose norm and checkpoint layout this does not know (refused at config load).
class TensorParallelOver final : public DataParallel {
 public:
  TensorParallelOver(dist::DistContext& dist, int64_t tp, int64_t dp, std::unique_ptr<DataParallel> inner)
      : dist_(dist), tp_(tp), dp_(dp), inner_(std::move(inner)) {}
  std::string name() const override {
    return "tensor parallel " + std::to_string(tp_) + " (data parallel " + std::to_string(dp_) +
           (dp_ > 1 ? ": " + inner_->name() : "") + ")";
  }
  void prepare(torch::nn::Module& module, const std::vector<torch::Tensor>& params) override {
    model_ = dynamic_cast<const models::Model*>(&module);
    if (!model_) throw std::logic_error("tensor parallel: the strategy needs a models::Model");
    inner_->prepare(module, params);  // dp rank 0's slices to its dp peers (the same: one seed), the buckets
    std::set<std::string> partial;
    for (const auto& [name, spec] : model_->shard_specs())
      if (spec.partial_grad) partial.insert(name);
    std::set<const void*> trained;
    for (const auto& p : params) trained.insert(p.unsafeGetTensorImpl());
    for (const auto& p : module.named_parameters(/*recurse=*/true))
      if (partial.count(p.key()) && trained.count(p.value().unsafeGetTensorImpl())) partial_.push_back(p.value());
    spdlog::info("{}: tp rank {} of {} holds its slices of {} parameter tensors{}", name(), model_->tp_comm().rank(),
                 tp_, model_->shard_specs().size() - partial.size(),
                 partial.empty() ? "" : fmt::format(", sequence parallel ({} partial-gradient tensors)", partial_.size()));
  }
  void before_backward(bool last_micro_batch) override { inner_->before_backward(last_micro_batch); }
  void after_backward() override {
    inner_->after_backward();  // the mean over dp
    tpl::sum_partial_grads(partial_, model_->tp_comm());
  }
  void commit(int64_t step) override { inner_->commit(step); }
  std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimConfig& cfg,
                                                          const torch::nn::Module& model) override {
    return inner_->make_optimizer(cfg, model);
  }
  const std::vector<torch::Tensor>& step_params(const std::vector<torch::Tensor>& params) const override {
    return inner_->step_params(params);
  }
  torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) override {
    return tp_clip_grad_norm(params, *model_, max_norm);
  }
  void agree_flag(torch::Tensor& flag) override { dist_.all_reduce_sum_async(flag, "fp16 overflow")->wait(); }
  void after_step() override { inner_->after_step(); }
  void hold_full_params() const override { inner_->hold_full_params(); }
  void release_full_params(bool written) const override { inner_->release_full_params(written); }
  HeldBytes held_bytes(const std::vector<torch::Tensor>& params, const torch::optim::Optimizer& opt) const override {
    return inner_->held_bytes(params, opt);
  }
  MemoryPlan memory_plan(const models::Model& model, const config::OptimConfig& optim) const override {
    return inner_->memory_plan(model, optim);  // of this rank's slices, over its dp group
  }
  const CheckpointPart& checkpoint_part() const override { return inner_->checkpoint_part(); }

 private:
  dist::DistContext& dist_;
  int64_t tp_, dp_;
  std::unique_ptr<DataParallel> inner_;  // over the mesh's dp group
  const models::Model* model_ = nullptr;
  std::vector<torch::Tensor> partial_;  // sequence parallel's partial_grad parameters
};

torch::Tensor squared_norm(const std::vector<torch::Tensor>& grads, const torch::TensorOptions& opts) {
  if (grads.empty()) return torch::zeros({}, opts);
  auto n = torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat64);
  return (n * n).sum();
}

}  // namespace

TensorParallelRun::TensorParallelRun(dist::DistContext& dist, const config::DistConfig& cfg)
    : sequence_parallel_(cfg.sequence_parallel) {
  if (cfg.tensor_parallel <= 1) return;
  mesh_ = dist::DeviceMesh::create(dist, cfg.tensor_parallel);
  comm_ = std::make_unique<dist::GroupCommunicator>(mesh_->group(dist::MeshDim::TP));
}

models::BuildContext TensorParallelRun::build_context() const {
  models::BuildContext ctx;
  if (comm_) ctx.tp = comm_.get();
  ctx.sequence_parallel = sequence_parallel_ && active();
  return ctx;
}

dist::LaunchEnv TensorParallelRun::data_env(const dist::LaunchEnv& env) const {
  if (!mesh_) return env;
  dist::LaunchEnv e = env;
  e.rank = mesh_->rank(dist::MeshDim::DP);
  e.world_size = mesh_->size(dist::MeshDim::DP);
  return e;
}

std::unique_ptr<DataParallel> TensorParallelRun::make_strategy(dist::DistContext& dist, const config::DistConfig& cfg) const {
  if (!mesh_) return make_data_parallel(dist, dist.world_group(), cfg);
  const int64_t dp = mesh_->size(dist::MeshDim::DP);
  if (cfg.sharding != config::Sharding::None)  // config load refuses it first; this guards other callers
    throw std::invalid_argument("dist.tensor_parallel " + std::to_string(size()) + " with dist.sharding '" +
                                config::name_of(cfg.sharding) + "' is not supported yet (dist.sharding none)");
  auto inner = make_data_parallel(dist, mesh_->group(dist::MeshDim::DP), cfg);  // replicated DDP over dp
  return std::make_unique<TensorParallelOver>(dist, size(), dp, std::move(inner));
}

torch::Tensor tp_clip_grad_norm(const std::vector<torch::Tensor>& params, const models::Model& model, double max_norm) {
  std::set<const void*> sharded;
  const auto specs = model.shard_specs();
  std::set<std::string> sharded_names;
  for (const auto& [name, spec] : specs)
    if (!spec.replicated()) sharded_names.insert(name);
  for (const auto& p : model.named_parameters(/*recurse=*/true))
    if (sharded_names.count(p.key())) sharded.insert(p.value().unsafeGetTensorImpl());
  std::vector<torch::Tensor> own, replicated;
  torch::TensorOptions opts = torch::TensorOptions().dtype(torch::kFloat64);
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    opts = opts.device(p.grad().device());
    (sharded.count(p.unsafeGetTensorImpl()) ? own : replicated).push_back(p.grad());
  }
  auto sq = squared_norm(own, opts);  // every tp rank reaches the all-reduce, with or without gradients
  model.tp_comm().all_reduce(sq, tpl::ReduceOp::Sum);
  auto total = (sq + squared_norm(replicated, opts)).sqrt().to(torch::kFloat32);
  if (max_norm > 0) {
    std::vector<torch::Tensor> grads = own;
    grads.insert(grads.end(), replicated.begin(), replicated.end());
    if (!grads.empty()) {
      auto coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
      at::_foreach_mul_(grads, coef.to(grads.front().dtype()));
    }
  }
  return total;
}

}  // namespace trainer::engine
