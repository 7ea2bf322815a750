// The one thing tensor-parallel code needs from the outside world: collectives over the ranks that
// share a layer (the mesh's tp dimension). Models include this area, never src/dist: the engine
// hands them a Communicator that dist implements over the mesh's tp subgroup
// (dist/tp_communicator.hpp), as it hands them a models::UnitGate for dist.sharding: full.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace trainer::tensor_parallel {

enum class ReduceOp { Sum, Max };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;  // this process's index among the group's ranks
  virtual int64_t size() const = 0;  // T
  // In place: every rank's `t` combined with `op`; every rank gets the result.
  virtual void all_reduce(torch::Tensor& t, ReduceOp op) = 0;
  // Every rank's `t` (same shape) concatenated along `dim` in rank order.
  virtual torch::Tensor all_gather(const torch::Tensor& t, int64_t dim) = 0;
  // The sum over ranks of `t`, cut along `dim` into size() equal chunks: this rank's chunk.
  virtual torch::Tensor reduce_scatter(const torch::Tensor& t, int64_t dim) = 0;
};

// T = 1: every collective returns its input. The mappings and layers skip their collectives
// altogether when size() == 1, so a model built over solo() is the plain model.
class SoloCommunicator final : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 1; }
  void all_reduce(torch::Tensor&, ReduceOp) override {}
  torch::Tensor all_gather(const torch::Tensor& t, int64_t) override { return t; }
  torch::Tensor reduce_scatter(const torch::Tensor& t, int64_t) override { return t; }
};

// One rank of a tp group of `size` without its peers: the collectives return tensors of the right
// shapes (all_gather: `size` copies of this rank's tensor, reduce_scatter: this rank's chunk, all_reduce:
// the input), not the right values. For measuring what a rank of the mesh allocates in one process
// (`trainer check --memory`, train.batch_size auto's probe: engine/startup/memory_plan.hpp); never
// for training.
class StandInCommunicator final : public Communicator {
 public:
  StandInCommunicator(int64_t rank, int64_t size) : rank_(rank), size_(size) {}
  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  void all_reduce(torch::Tensor&, ReduceOp) override {}
  torch::Tensor all_gather(const torch::Tensor& t, int64_t dim) override {
    return torch::cat(std::vector<torch::Tensor>(static_cast<size_t>(size_), t), dim);
  }
  torch::Tensor reduce_scatter(const torch::Tensor& t, int64_t dim) override {
    const int64_t n = t.size(dim) / size_;
    return t.narrow(dim, rank_ * n, n).contiguous();
  }

 private:
  int64_t rank_, size_;
};

inline Communicator& solo() {
  static SoloCommunicator c;
  return c;
}

}  // namespace trainer::tensor_parallel
