// Bucketed gradient all-reduce launched from gradient hooks, so communication overlaps backward.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dist/dist_context.hpp"
#include "dist/group.hpp"

namespace trainer::dist {

// One bucket: consecutive parameters (in reverse registration order) of one dtype and device,
// flattened into one buffer for one all-reduce.
struct GradBucket {
  std::vector<size_t> params;   // indices into GradSync's parameter list, in bucket order
  std::vector<int64_t> offsets;  // element offset of each parameter in `flat`
  int64_t numel = 0;
  torch::Tensor flat;            // (numel,) the bucket buffer, allocated once
  size_t pending = 0;            // gradients not yet ready this step
  std::shared_ptr<AsyncOp> op;   // launched all-reduce, null until launched
};

// Over `group`: the data-parallel ranks that hold replicas of these parameters (the world, or the
// device mesh's dp group: then each rank's own TP-local parameters). An inactive group (of one)
// installs no hook and runs no collective: the gradients stay as backward left them.
class GradSync {   // bucketed all-reduce launched from gradient hooks, overlapping backward
 public:
  // `params` in registration order (module.parameters()); those without requires_grad are skipped.
  // Checks once that every rank of `group` built the same bucket layout (DistError naming both
  // hashes). `group` outlives this.
  GradSync(Group& group, std::vector<torch::Tensor> params, double bucket_mb);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  void set_enabled(bool sync);   // false on non-final micro-steps of gradient accumulation (no_sync)
  bool enabled() const { return enabled_; }
  void finish();                 // wait for every bucket of this step; gradients are then the group's mean

  // Introspection for tests and logs.
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  int64_t buckets_launched_in_backward() const { return launched_in_backward_; }  // of the last step

  // Called by the post-accumulate-grad hook of parameter `index` (public for the hook only).
  void on_grad_ready(size_t index);

 private:
  void build_buckets(double bucket_mb);
  void launch_ready_buckets();  // under mu_: buckets launch strictly in index order on every rank
  void launch(size_t b);
  void reset_step();

  Group& group_;
  std::vector<torch::Tensor> params_;
  std::vector<size_t> bucket_of_;  // parameter index -> bucket index
  std::vector<bool> ready_;        // parameter index -> gradient ready this step
  std::vector<GradBucket> buckets_;
  size_t next_launch_ = 0;
  bool enabled_ = true;
  bool hooked_ = false;
  int64_t launched_in_backward_ = 0;
  uint64_t layout_hash_ = 0;
  std::mutex mu_;  // hooks may run on autograd's device threads (CUDA)
};

}  // namespace trainer::dist
