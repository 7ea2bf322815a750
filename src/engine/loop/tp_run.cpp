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

// Data parallel 1 (T == world): each tp rank steps its own slices. Nothing to broadcast (every rank
// built the same full model from the seed and kept its slice), no gradient averaging; after backward
// the partial gradients of sequence parallel are summed over the tp group; the norm is the mesh's;
// the fp16 overflow vote is the world's. (dp > 1 comes with GradSync over the mesh's dp group.)
class TensorParallelOnly final : public DataParallel {
 public:
  TensorParallelOnly(dist::DistContext& dist, int64_t tp) : dist_(dist), tp_(tp) {}
  std::string name() const override { return "tensor parallel " + std::to_string(tp_) + " (data parallel 1)"; }
  void prepare(torch::nn::Module& module, const std::vector<torch::Tensor>& params) override {
    model_ = dynamic_cast<const models::Model*>(&module);
    if (!model_) throw std::logic_error("tensor parallel: the strategy needs a models::Model");
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
  void before_backward(bool) override {}
  void after_backward() override { tpl::sum_partial_grads(partial_, model_->tp_comm()); }
  torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) override {
    return tp_clip_grad_norm(params, *model_, max_norm);
  }
  void agree_flag(torch::Tensor& flag) override { dist_.all_reduce_sum_async(flag, "fp16 overflow")->wait(); }
  MemoryPlan memory_plan(const models::Model& model, const config::OptimConfig& optim) const override {
    return strategy_memory_plan(config::DistConfig{}, 1, model, optim);  // this rank's slices, one replica
  }

 private:
  dist::DistContext& dist_;
  int64_t tp_;
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
  if (mesh_->size(dist::MeshDim::DP) > 1 || cfg.sharding != config::Sharding::None)
    throw std::invalid_argument("dist.tensor_parallel " + std::to_string(size()) + " over " +
                                std::to_string(dist.world_size()) + " ranks: data parallel over the mesh is not "
                                "supported yet (launch T ranks, dist.sharding none)");
  return std::make_unique<TensorParallelOnly>(dist, size());
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
