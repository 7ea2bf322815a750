// What GradSync (replicated DDP) and ShardSync (the sharded strategies) share: the bucket plan, the
// per-parameter hook that tells them a gradient is ready, and the check that every rank of their
// group built the same bucket layout (else the collectives pair up the wrong buffers, or hang).
#pragma once

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/dist_context.hpp"
#include "dist/group.hpp"

namespace trainer::dist {

// Runs after autograd has accumulated a parameter's gradient into .grad, so with gradient
// accumulation the bucket sees the sum over micro-steps, not just the last micro-step.
template <class Sync>
class GradReadyHook : public torch::autograd::PostAccumulateGradHook {
 public:
  GradReadyHook(Sync* sync, size_t index) : sync_(sync), index_(index) {}
  void operator()(const torch::autograd::Variable&) override { sync_->on_grad_ready(index_); }

 private:
  Sync* sync_;
  size_t index_;
};

// Packs `params` into buckets of about `bucket_mb`, in reverse registration order (roughly the order
// backward produces their gradients), one dtype and device per bucket: each bucket's params
// (indices), their element offsets and its numel; `bucket_of` maps a parameter to its bucket.
template <class Bucket>
void plan_reverse_buckets(const std::vector<torch::Tensor>& params, double bucket_mb, std::vector<Bucket>& buckets,
                          std::vector<size_t>& bucket_of) {
  const auto cap = static_cast<int64_t>(bucket_mb * 1024 * 1024);  // bytes
  bucket_of.assign(params.size(), 0);
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const auto& p = params[k];
    bool fresh = buckets.empty() || bytes >= cap;
    if (!fresh) {  // one dtype and device per bucket buffer
      const auto& first = params[buckets.back().params.front()];
      fresh = first.scalar_type() != p.scalar_type() || first.device() != p.device();
    }
    if (fresh) {
      buckets.emplace_back();
      bytes = 0;
    }
    auto& b = buckets.back();
    b.params.push_back(k);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
    bytes += p.numel() * static_cast<int64_t>(p.element_size());
    bucket_of[k] = buckets.size() - 1;
  }
}

// FNV-1a over the 8 bytes of `v`, for the layout hashes.
inline uint64_t layout_fnv1a(uint64_t h, int64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

struct LayoutMismatch {
  int64_t rank;  // the first rank whose hash is not rank 0's
  uint64_t rank0_hash, rank_hash;
};

// All-gathers every rank's `hash` over `group` (a collective named `what`); the first group rank
// that differs from group rank 0, or nullopt when all agree (and on an inactive group). The check
// runs over the data-parallel group, not the world: only its ranks' buffers pair up in the
// collectives, and its tensor-parallel peers hold other (TP-local) parameters, of other sizes when
// a split is uneven.
inline std::optional<LayoutMismatch> find_layout_mismatch(Group& group, uint64_t hash, const std::string& what) {
  if (!group.active()) return std::nullopt;
  auto mine = torch::tensor({static_cast<int64_t>(hash)}, torch::kInt64).to(group.device());
  auto all = group.all_gather(mine, 0, what).cpu();  // (size)
  const int64_t first = all[0].item<int64_t>();
  for (int64_t r = 1; r < group.size(); ++r)
    if (all[r].item<int64_t>() != first)
      return LayoutMismatch{r, static_cast<uint64_t>(first), static_cast<uint64_t>(all[r].item<int64_t>())};
  return std::nullopt;
}

}  // namespace trainer::dist
