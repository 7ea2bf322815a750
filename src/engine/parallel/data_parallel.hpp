// The data-parallel strategy seam: how the ranks' replicas stay in step. The run calls these hooks
// and never asks whether it is distributed; a single process is a world of one whose hooks do
// nothing. Multi-rank strategies: replicated DDP (dist::GradSync: bucketed all-reduce launched
// from gradient hooks, overlapping backward) and the sharded ones of dist.sharding
// (engine/sharded_parallel.hpp over dist::ShardSync): each rank steps only its slice of the
// parameters, so the strategy also owns the optimizer's construction, the global gradient norm,
// the agreement on fp16 overflow, the all-gather after the step and the held-bytes measurement.
//
// Two sets of ranks: the data-parallel group `dp` (a dist::Group: the world, or the device mesh's
// dp group when tensor parallel splits the model, each rank then holding its own TP-local
// parameters) is what the replicas are replicated or sharded over: the weight broadcast, the
// gradient mean (divided by the dp size), the shards, the clipping norm's sum over slices, the
// bucket layout check and the checkpoint's shard ranks. The world votes: the fp16 overflow flag
// (agree_flag) and the dist.recovery commit (commit), so that every rank, tp peers too, steps or
// skips together; the non-finite and stop votes are the run's, over the world (engine/step, loop).
// With T = 1 the dp group is the world: the same collectives in the same order as without a mesh.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "dist/dist_context.hpp"
#include "dist/group.hpp"
#include "engine/parallel/memory_figures.hpp"
#include "io/checkpoint.hpp"
#include "models/model.hpp"

namespace trainer::engine {

// The strategy's part of a checkpoint (engine/checkpointing.cpp, checkpoint_manager.cpp ask for it):
// how the optimizer state is written and read back. This class is the replicated layout: rank 0
// writes the whole optimizer state (optimizer.safetensors). A sharded strategy's
// (engine/sharded_checkpoint.hpp): every rank writes its own shard file (shard_group(),
// shard_tensors()) in parallel, rank 0 records shard_layout() in state.json.
class CheckpointPart {
 public:
  virtual ~CheckpointPart() = default;
  virtual bool sharded_state() const { return false; }
  virtual std::string shard_group() const { return ""; }
  virtual io::NamedTensors shard_tensors(const torch::optim::Optimizer&, const torch::nn::Module&) const { return {}; }
  virtual nlohmann::json shard_layout(const torch::nn::Module&) const { return nullptr; }
  // Sharded: this rank's index and the number of ranks in the group the shards are over (dp).
  virtual std::pair<int64_t, int64_t> shard_of() const { return {0, 1}; }
  // This rank's optimizer state in the replicated layout, whole tensors per parameter name (what
  // optimizer.safetensors holds): a tensor-parallel run gathers it over tp before rank 0 writes it.
  // Sharded: the pieces gathered over the dp group, a collective of it (every dp rank, the same point).
  virtual io::NamedTensors whole_optimizer_state(const torch::optim::Optimizer& opt, const torch::nn::Module& model) const;
  // Tensor parallel: whether this rank's part goes into a checkpoint written in parts (its tp group is
  // dp rank 0's; the dp replicas hold the same slices). Not asked without tensor parallel.
  virtual bool writes_tp_part() const { return true; }
  // Pipeline parallel: this rank's pp coordinate and the pp size (a checkpoint in parts then has a
  // part per (pp, tp) rank), and whether this rank's part holds the tensor `name` (a parameter, a
  // buffer or an optimizer field "<parameter>.<field>": each in exactly one stage's part).
  virtual int64_t pipeline_rank() const { return 0; }
  virtual int64_t pipeline_size() const { return 1; }
  virtual bool owns(const std::string& /*name*/) const { return true; }
  // Loads optimizer state given in the replicated layout (whole tensors per parameter name).
  virtual void load_optimizer(torch::optim::Optimizer& opt, const torch::nn::Module& model,
                              const io::NamedTensors& full) const;
};
// The replicated layout's (stateless) part: a world of one, DDP, and checkpoint code without a strategy.
const CheckpointPart& replicated_checkpoint_part();

class DataParallel {
 public:
  virtual ~DataParallel() = default;
  virtual std::string name() const = 0;  // for the log: "single process", "replicated (DDP)"
  // Before training: the same weights on every rank of the dp group (its rank 0's; on a fresh start
  // model.init then loads the same file on every rank), then whatever the strategy attaches to the
  // model's unique trainable parameters `params` (train.freeze's parameters are not among them: no
  // bucket, no hook). Tensor-parallel peers keep their own weights.
  virtual void prepare(torch::nn::Module& model, const std::vector<torch::Tensor>& params) = 0;
  // Before prepare, on the ranks that call it alike: parameters whose elements must be stepped by the
  // same kernel code in every layout (a pipeline's tied copies, which must stay bit for bit equal
  // while the first and last stage cut them into other pieces). A sharded strategy starts each piece
  // of them at a multiple of dist::kPieceAlign elements of the parameter; replicated ones step whole
  // tensors already.
  virtual void align_pieces(const std::vector<torch::Tensor>& /*params*/) {}
  // Before each micro-batch's backward: only the last micro-batch of a step communicates.
  virtual void before_backward(bool last_micro_batch) = 0;
  // After the step's last backward: every rank holds the gradients averaged over its dp group when
  // this returns (sharded: of its slices).
  virtual void after_backward() = 0;
  // Between the gradient sync and the optimizer step of `step` (0-based): under dist.recovery
  // in_process every rank of the world votes that its sync completed, and none steps unless all did
  // (throws dist::DistError: the step is abandoned, weights and optimizer state untouched).
  virtual void commit(int64_t /*step*/) {}

  // The optimizer over what this rank steps. Replicated: every unique parameter (build_optimizer).
  virtual std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimConfig& cfg,
                                                                  const torch::nn::Module& model);
  // The tensors whose .grad the optimizer steps (the loss scaler, clipping and the non-finite checks
  // read them): `params` when replicated, this rank's pieces when sharded.
  virtual const std::vector<torch::Tensor>& step_params(const std::vector<torch::Tensor>& params) const {
    return params;
  }
  // For each tensor of step_params(params), in its order, the parameter of `params` whose gradient it
  // holds: the tensor itself when replicated, the parameter a sharded strategy's piece is cut from
  // (so a wrapper tells the pieces of tensor-parallel slices from those of replicated parameters).
  virtual std::vector<torch::Tensor> step_param_sources(const std::vector<torch::Tensor>& params) const {
    return params;
  }
  // True when the gradients of step_params() are this rank's part of gradients sharded over the dp
  // group (a sum of their squares is summed over the dp group for the whole); false when each rank
  // holds whole gradients.
  virtual bool shards_gradients() const { return false; }
  // Clips the gradients of step_params() to max_norm (0 = off) by their global norm, which it
  // returns. Sharded: the squared norms of the slices are summed over the dp group first (the norm
  // of this rank's whole, TP-local, gradient).
  virtual torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& step_params, double max_norm);
  // `flag` (the fp16 scaler's found-inf) summed in place over the whole world whenever its ranks can
  // see different gradients (sharded: each sees its slice; a mesh with tp > 1: tp peers hold other
  // parameters), so every rank skips the same steps. Replicated over the whole world: the ranks
  // see the same gradients, nothing to agree on (no collective).
  virtual void agree_flag(torch::Tensor&) {}
  // After the optimizer step (taken or skipped): sharded strategies all-gather the parameters.
  virtual void after_step() {}
  // dist.sharding full keeps only this rank's slice of the parameters outside a unit's forward and
  // backward. What reads or writes the whole model's weights at other times (checkpoint save and
  // restore, model.init) holds them gathered meanwhile: FullParams below. hold is a collective (every
  // rank at the same point); release is not. written: the weights were overwritten, keep them.
  // (const: the checkpoint code holds the strategy const; gathering changes no state it reports)
  virtual void hold_full_params() const {}
  virtual void release_full_params(bool /*written*/) const {}
  // Before an evaluation, a collective of the dp group (every rank at the same point): dp rank 0's
  // buffers to every replica (BatchNorm's running statistics follow each rank's own slices), as
  // DDP's broadcast_buffers gives them, so that every rank's share of the evaluation, and a resumed
  // run's (whose checkpoint keeps rank 0's), score with the same statistics.
  virtual void sync_buffers(torch::nn::Module& /*model*/) {}
  // Bytes this rank holds for parameters, gradients and optimizer state, measured from the tensors
  // (the record's mem_*_bytes); call after the step's backward, when the gradients exist.
  struct HeldBytes {
    int64_t params = 0, grads = 0, optimizer = 0;
  };
  virtual HeldBytes held_bytes(const std::vector<torch::Tensor>& params, const torch::optim::Optimizer& opt) const;

  // What this strategy holds per rank (memory_plan.hpp): strategy_memory_plan for its config and dp size.
  virtual MemoryPlan memory_plan(const models::Model& model, const config::OptimConfig& optim) const = 0;
  // How this rank's optimizer state goes into a checkpoint and back (CheckpointPart below).
  virtual const CheckpointPart& checkpoint_part() const { return replicated_checkpoint_part(); }

 protected:
  virtual int64_t extra_grad_bytes() const { return 0; }  // gradient buffers the strategy keeps
};

// The model's whole weights for a scope (see DataParallel::hold_full_params); `parallel` may be null.
class FullParams {
 public:
  FullParams(const DataParallel* parallel, bool write) : parallel_(parallel), write_(write) {
    if (parallel_) parallel_->hold_full_params();
  }
  ~FullParams();  // a failure to release is logged (a destructor must not throw)
  FullParams(const FullParams&) = delete;
  FullParams& operator=(const FullParams&) = delete;

 private:
  const DataParallel* parallel_;
  bool write_;
};

// Bytes of the optimizer's state tensors (unique storages).
int64_t optimizer_state_bytes(const torch::optim::Optimizer& opt);

// A world of one when `world` is inactive, else the strategy dist.* asks for (replicated DDP, or
// dist.sharding's) over `dp`: world.world_group() without a device mesh, else the mesh's dp group
// (a dp group of one replicates nothing and shards nothing: no dp collective). Both outlive it.
std::unique_ptr<DataParallel> make_data_parallel(dist::DistContext& world, dist::Group& dp,
                                                 const config::DistConfig& cfg);

// The memory plan of the strategy make_data_parallel builds for `cfg` over `dp_size` data-parallel
// ranks (the world size without tensor parallel), without building it (no process group):
// `trainer check --memory` and train.batch_size auto read it.
MemoryPlan strategy_memory_plan(const config::DistConfig& cfg, int64_t dp_size, const models::Model& model,
                                const config::OptimConfig& optim);

}  // namespace trainer::engine
