// The run's tensor-parallel parts (tp_run.hpp).
#include "engine/loop/tp_run.hpp"

#include <spdlog/spdlog.h>

#include <functional>
#include <set>
#include <stdexcept>

#include "dist/dist_context.hpp"
#include "engine/parallel/data_parallel_over.hpp"
#include "engine/optim/grad_clip.hpp"
#include "tensor_parallel/sharding.hpp"

namespace trainer::engine {
namespace {

namespace tpl = tensor_parallel;

// The checkpoint part of a tensor-parallel run: the tp ranks of dp rank 0 each write their slices in
// the replicated layout's names (checkpointing's tp_parts, io/tensor_parts.hpp), whatever the inner
// strategy; under a sharded inner one (dp) every rank writes its optimizer pieces of its slices
// (sharded_checkpoint.hpp's part shards) and, on restore, keeps its pieces of this rank's slices. So a
// checkpoint holds global names, shapes and ranges, no layout of the run: it resumes at any (dp, tp,
// sharding).
class TensorParallelCheckpoint final : public CheckpointPartOver {
 public:
  TensorParallelCheckpoint(const DataParallel& inner, bool dp_rank0) : CheckpointPartOver(inner), dp_rank0_(dp_rank0) {}
  bool writes_tp_part() const override { return dp_rank0_; }

 private:
  bool dp_rank0_;
};

// A hash of the trainable parameters' shapes and dtypes: a sharded strategy's layout is a function of
// them (and of the config, the same on every rank), so equal hashes over tp mean that each tp rank's
// pieces cover the same elements of its slice.
int64_t shapes_hash(const std::vector<torch::Tensor>& params) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (const auto& p : params) {
    mix(static_cast<uint64_t>(p.scalar_type()));
    for (auto d : p.sizes()) mix(static_cast<uint64_t>(d));
  }
  return static_cast<int64_t>(h >> 1);
}

// The strategy of a tensor-parallel run: the data-parallel strategy over the mesh's dp group (the
// replicas are the dp ranks of one tp coordinate, their parameters this rank's TP slices: replicated
// DDP, or dist.sharding's pieces of the slices), plus what the tp group needs after backward. The
// inner strategy averages the gradients over dp; then the partial gradients of sequence parallel are
// summed over tp (both linear: the order does not matter; sharded, on the pieces, which cover the
// same elements on every tp rank: prepare checks it); the norm is the mesh's (mesh_clip_grad_norm);
// the fp16 overflow vote is the whole world's (tp peers see other gradients). At dp 1 the inner
// strategy is over a group of one: no dp collective, no hook. The checkpoint part writes global
// tensors whatever the inner layout (TensorParallelCheckpoint). Every other hook is the inner
// strategy's (DataParallelOver).
class TensorParallelOver final : public DataParallelOver {
 public:
  TensorParallelOver(dist::DistContext& dist, dist::Group& dp, int64_t tp, std::unique_ptr<DataParallel> inner)
      : DataParallelOver(std::move(inner)), dist_(dist), dp_(dp), tp_(tp), checkpoint_(*inner_, dp.rank() == 0) {}
  std::string name() const override {
    return "tensor parallel " + std::to_string(tp_) + " (data parallel " + std::to_string(dp_.size()) +
           (dp_.size() > 1 ? ": " + inner_->name() : "") + ")";
  }
  void prepare(torch::nn::Module& module, const std::vector<torch::Tensor>& params) override {
    model_ = dynamic_cast<const models::Model*>(&module);
    if (!model_) throw std::logic_error("tensor parallel: the strategy needs a models::Model");
    inner_->prepare(module, params);  // dp rank 0's slices to its dp peers (the same: one seed), the buckets
    std::set<std::string> sharded, partial;
    for (const auto& [name, spec] : model_->shard_specs()) {
      if (!spec.replicated()) sharded.insert(name);
      if (spec.partial_grad) partial.insert(name);
    }
    std::set<const void*> sharded_params, partial_params;
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      if (sharded.count(p.key())) sharded_params.insert(p.value().unsafeGetTensorImpl());
      if (partial.count(p.key())) partial_params.insert(p.value().unsafeGetTensorImpl());
    }
    const auto& steps = inner_->step_params(params);
    const auto sources = inner_->step_param_sources(params);
    for (size_t i = 0; i < steps.size(); ++i) {
      if (sharded_params.count(sources[i].unsafeGetTensorImpl())) sharded_.insert(steps[i].unsafeGetTensorImpl());
      if (partial_params.count(sources[i].unsafeGetTensorImpl())) partial_.push_back(steps[i]);
    }
    // a collective of the tp group: decided by what every tp rank knows alike (the model's specs), not
    // by this rank's pieces (a dp rank may own no piece of a partial-gradient parameter)
    if (inner_->shards_gradients() && !partial.empty()) check_same_layout(params);
    spdlog::info("{}: tp rank {} of {} holds its slices of {} parameter tensors{}", name(), model_->tp_comm().rank(),
                 tp_, sharded.size(),
                 partial.empty() ? "" : fmt::format(", sequence parallel ({} partial-gradient tensors)", partial_.size()));
  }
  void after_backward() override {
    inner_->after_backward();  // the mean over dp
    tpl::sum_partial_grads(partial_, model_->tp_comm());
  }
  torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& step_params, double max_norm) override {
    auto is_sharded = [this](const torch::Tensor& t) { return sharded_.count(t.unsafeGetTensorImpl()) > 0; };
    return mesh_clip_grad_norm(step_params, is_sharded, inner_->shards_gradients() ? &dp_ : nullptr,
                               model_->tp_comm(), max_norm);
  }
  void agree_flag(torch::Tensor& flag) override { dist_.all_reduce_sum_async(flag, "fp16 overflow")->wait(); }
  const CheckpointPart& checkpoint_part() const override { return checkpoint_; }

 private:
  // Sequence parallel over dp shards: the pieces of a partial-gradient slice are summed over tp
  // element by element, so every tp rank must cut its slices into the same pieces.
  void check_same_layout(const std::vector<torch::Tensor>& params) const {
    auto& comm = model_->tp_comm();
    auto mine = torch::tensor({shapes_hash(params)}, torch::kInt64).to(params.front().device());
    auto all = comm.all_gather(mine, 0).cpu();
    for (int64_t r = 0; r < comm.size(); ++r)
      if (all[r].item<int64_t>() != all[0].item<int64_t>())
        throw std::invalid_argument("dist.sequence_parallel with dist.sharding: tp rank " + std::to_string(r) +
                                    " holds parameters of other shapes than tp rank 0, so their shards differ");
  }

  dist::DistContext& dist_;
  dist::Group& dp_;
  int64_t tp_;
  TensorParallelCheckpoint checkpoint_;
  const models::Model* model_ = nullptr;
  std::set<const void*> sharded_;       // the step params cut from TP-sharded parameters
  std::vector<torch::Tensor> partial_;  // the step params of sequence parallel's partial_grad parameters
};

torch::Tensor squared_norm(const std::vector<torch::Tensor>& grads, const torch::TensorOptions& opts) {
  if (grads.empty()) return torch::zeros({}, opts);
  auto n = torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat64);
  return (n * n).sum();
}

}  // namespace

TensorParallelRun::TensorParallelRun(dist::DistContext& dist, const config::RunConfig& cfg)
    : sequence_parallel_(cfg.dist.sequence_parallel) {
  const int64_t tp = cfg.dist.tensor_parallel, pp = cfg.dist.pipeline_parallel;
  if (tp <= 1 && pp <= 1) return;
  mesh_ = dist::DeviceMesh::create(dist, tp, pp);
  if (tp > 1) comm_ = std::make_unique<dist::GroupCommunicator>(mesh_->group(dist::MeshDim::TP));
  if (pp > 1) pipe_ = std::make_unique<PipelineStages>(dist, *mesh_, cfg);
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
  auto& dp = mesh_->group(dist::MeshDim::DP);
  std::unique_ptr<DataParallel> s = make_data_parallel(dist, dp, cfg);  // replicated DDP or dist.sharding's, over dp
  if (comm_) s = std::make_unique<TensorParallelOver>(dist, dp, size(), std::move(s));
  if (pipe_) s = pipe_->wrap(std::move(s));
  return s;
}

torch::Tensor mesh_clip_grad_norm(const std::vector<torch::Tensor>& step_params,
                                  const std::function<bool(const torch::Tensor&)>& tp_sharded, dist::Group* dp,
                                  tpl::Communicator& tp, double max_norm) {
  std::vector<torch::Tensor> own, replicated;
  torch::TensorOptions opts = torch::TensorOptions().dtype(torch::kFloat64);
  if (dp) opts = opts.device(dp->device());  // a dp rank may own no piece with a gradient
  for (const auto& p : step_params) {
    if (!p.grad().defined()) continue;
    opts = opts.device(p.grad().device());
    (tp_sharded(p) ? own : replicated).push_back(p.grad());
  }
  // [sharded, replicated]; every rank reaches the collectives, with or without gradients
  auto sq = torch::stack({squared_norm(own, opts), squared_norm(replicated, opts)});
  if (dp) dp->all_reduce(sq, dist::Reduce::Sum, "grad norm");  // the dp shards' pieces of each slice
  // the slices summed over tp; a replicated gradient is the same on every tp rank: tp rank 0's, once
  if (tp.rank() != 0) sq.select(0, 1).zero_();
  tp.all_reduce(sq, tpl::ReduceOp::Sum);
  auto total = sq.sum().sqrt().to(torch::kFloat32);
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
