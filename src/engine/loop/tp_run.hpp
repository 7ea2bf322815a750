// The run's model-parallel parts (dist.tensor_parallel, docs/TENSOR_PARALLEL.md; dist.pipeline_parallel,
// docs/PIPELINE.md): the device mesh built after the DistContext, the tp group's Communicator the
// model is built over, the pipeline stages of this rank, and the data-parallel strategy over the mesh.
// At T = P = 1 the mesh builds nothing and the run is today's: the model over solo(),
// make_data_parallel over the world.
#pragma once

#include <functional>
#include <memory>

#include "dist/device_mesh.hpp"
#include "dist/launch_env.hpp"
#include "dist/tp_communicator.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "engine/parallel/pipeline_parallel.hpp"
#include "models/model.hpp"

namespace trainer::engine {

class TensorParallelRun {
 public:
  TensorParallelRun() = default;
  // Every rank of the world (a collective when T or P > 1: the mesh's groups). DistError as DeviceMesh::create.
  TensorParallelRun(dist::DistContext& dist, const config::RunConfig& cfg);
  // dist.pipeline_parallel > 1: this rank's stages (null otherwise)
  PipelineStages* pipeline() const { return pipe_.get(); }
  bool active() const { return comm_ != nullptr; }  // T > 1
  int64_t size() const { return comm_ ? comm_->size() : 1; }
  // What the model's build gets: the tp communicator (solo() at T = 1), dist.sequence_parallel.
  models::BuildContext build_context() const;
  // The launcher's env with rank and world_size of the data-parallel dimension: the ranks of one tp
  // group read the same batches. `env` itself at T = 1.
  dist::LaunchEnv data_env(const dist::LaunchEnv& env) const;
  double seconds() const { return comm_ ? comm_->seconds() : 0.0; }  // in the tp group's collectives so far
  // The run's strategy over the current group: at T = P = 1 make_data_parallel's over the world; else
  // make_data_parallel's (replicated DDP or dist.sharding's) over the mesh's dp group (a group of one
  // at dp 1: nothing shared), with T > 1 the tp group's after-backward sums, norm and world-wide fp16
  // vote, with P > 1 the pipeline's tied sums and norm over the stages, and a checkpoint part that
  // writes global tensors.
  std::unique_ptr<DataParallel> make_strategy(dist::DistContext& dist, const config::DistConfig& cfg) const;

 private:
  std::unique_ptr<dist::DeviceMesh> mesh_;
  std::unique_ptr<dist::GroupCommunicator> comm_;  // over mesh_'s tp group; must outlive the model
  std::unique_ptr<PipelineStages> pipe_;            // over mesh_'s pp group
  bool sequence_parallel_ = false;
};

// The global gradient norm of a tensor-parallel model's step params (DataParallel::step_params: whole
// gradients, or this rank's pieces of them when `dp` is given: the strategy shards them over dp),
// which it returns after clipping their gradients to max_norm (0 = off) as engine::clip_grad_norm
// does. `tp_sharded(p)`: p is (a piece of) a TP slice. The squares of each kind are summed over dp
// (when sharded), then those of the slices over tp, the replicated ones (the same on every tp rank)
// counted once: tp rank 0's. A collective of dp (when given) and of the tp group, on every rank.
torch::Tensor mesh_clip_grad_norm(const std::vector<torch::Tensor>& step_params,
                                  const std::function<bool(const torch::Tensor&)>& tp_sharded, dist::Group* dp,
                                  tensor_parallel::Communicator& tp, double max_norm);

}  // namespace trainer::engine
