// The tensor-parallel Communicator (tensor_parallel/communicator.hpp) over a mesh's tp group: what the
// engine hands a model built with T > 1. It also keeps the time spent in its collectives, for the
// step records' TP share: the host's time (on NCCL a wait orders streams and returns, so the figure
// needs a device sync at the step's end to be the collectives' own).
#pragma once

#include <cstdint>

#include "dist/group.hpp"
#include "tensor_parallel/communicator.hpp"

namespace trainer::dist {

class GroupCommunicator final : public tensor_parallel::Communicator {
 public:
  explicit GroupCommunicator(Group& group) : group_(group) {}
  int64_t rank() const override { return group_.rank(); }
  int64_t size() const override { return group_.size(); }
  void all_reduce(torch::Tensor& t, tensor_parallel::ReduceOp op) override;
  torch::Tensor all_gather(const torch::Tensor& t, int64_t dim) override;
  torch::Tensor reduce_scatter(const torch::Tensor& t, int64_t dim) override;
  double seconds() const { return seconds_; }  // wall time in this communicator's collectives

 private:
  Group& group_;
  double seconds_ = 0;
};

}  // namespace trainer::dist
