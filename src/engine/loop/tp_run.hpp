// The run's tensor-parallel parts (dist.tensor_parallel, docs/TENSOR_PARALLEL.md): the device mesh
// built after the DistContext, the tp group's Communicator the model is built over, and the
// data-parallel strategy of a tensor-parallel run. At T = 1 the mesh builds nothing and the run is
// today's: the model over solo(), make_data_parallel over the world.
#pragma once

#include <memory>

#include "dist/device_mesh.hpp"
#include "dist/launch_env.hpp"
#include "dist/tp_communicator.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "models/model.hpp"

namespace trainer::engine {

class TensorParallelRun {
 public:
  TensorParallelRun() = default;
  // Every rank of the world (a collective when T > 1: the mesh's groups). DistError as DeviceMesh::create.
  TensorParallelRun(dist::DistContext& dist, const config::DistConfig& cfg);
  bool active() const { return comm_ != nullptr; }  // T > 1
  int64_t size() const { return comm_ ? comm_->size() : 1; }
  // What the model's build gets: the tp communicator (solo() at T = 1), dist.sequence_parallel.
  models::BuildContext build_context() const;
  // The launcher's env with rank and world_size of the data-parallel dimension: the ranks of one tp
  // group read the same batches. `env` itself at T = 1.
  dist::LaunchEnv data_env(const dist::LaunchEnv& env) const;
  double seconds() const { return comm_ ? comm_->seconds() : 0.0; }  // in the tp group's collectives so far
  // The run's strategy over the current group: at T = 1 make_data_parallel's over the world; else
  // replicated DDP over the mesh's dp group (a group of one at dp 1) with the tp group's
  // after-backward sums, norm and world-wide fp16 vote. std::invalid_argument for dist.sharding other
  // than none with T > 1 (not supported yet).
  std::unique_ptr<DataParallel> make_strategy(dist::DistContext& dist, const config::DistConfig& cfg) const;

 private:
  std::unique_ptr<dist::DeviceMesh> mesh_;
  std::unique_ptr<dist::GroupCommunicator> comm_;  // over mesh_'s tp group; must outlive the model
  bool sequence_parallel_ = false;
};

// The gradient norm of a tensor-parallel model's gradients: the squared norms of the sharded
// parameters summed over the tp group, the replicated ones (the same on every tp rank) counted once.
// A collective of the tp group. Clips to max_norm (0 = off) as engine::clip_grad_norm does.
torch::Tensor tp_clip_grad_norm(const std::vector<torch::Tensor>& params, const models::Model& model, double max_norm);

}  // namespace trainer::engine
