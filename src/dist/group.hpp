// A process group over some ranks of the world: one dimension of the device mesh (dist/device_mesh.hpp)
// for one rank. Its collectives block until done and fail as DistContext's do (DistError naming the
// rank, the group, the operation, its sequence number in this group and the step), watched by the
// same watchdog. c10d stays in group.cpp.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainer::dist {

class DistContext;

enum class Reduce { Sum, Max };  // no AVG: Gloo's is wrong in some versions (pytorch#162338); sum, then divide

class Group {
 public:
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const { return name_; }
  int64_t rank() const { return rank_; }  // this process's index in ranks()
  int64_t size() const { return static_cast<int64_t>(ranks_.size()); }
  const std::vector<int64_t>& ranks() const { return ranks_; }  // world ranks, ascending
  bool active() const { return size() > 1; }
  // True when this group built its own c10d backend (false for a group of one or of the whole world).
  bool owns_backend() const { return owns_; }
  // How many collectives this group has run: a mesh dimension of size one must stay at 0.
  uint64_t collectives() const { return seq_; }

  // In place over the group's ranks. `t` on the context's device; any layout (copied when not contiguous).
  void all_reduce(torch::Tensor& t, Reduce op, const std::string& what);
  // Every rank's `t` (same shape everywhere) concatenated along `dim`, in rank order.
  torch::Tensor all_gather(const torch::Tensor& t, int64_t dim, const std::string& what);
  // The sum over ranks of `t`, cut along `dim` into size() equal chunks: this rank's chunk.
  // t.size(dim) must divide by size().
  torch::Tensor reduce_scatter(const torch::Tensor& t, int64_t dim, const std::string& what);

 private:
  friend class DistContext;
  struct Backend;  // c10d's backend (group.cpp)
  Group() = default;

  DistContext* ctx_ = nullptr;
  std::string name_;
  std::vector<int64_t> ranks_;
  int64_t rank_ = 0;
  bool owns_ = false;
  uint64_t seq_ = 0;
  std::unique_ptr<Backend> backend_;
};

}  // namespace trainer::dist
