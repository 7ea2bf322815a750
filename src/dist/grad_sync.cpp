// GradSync: see grad_sync.hpp. The shape follows torch DDP's Reducer, much reduced: buckets in reverse
// registration order (roughly the order backward produces gradients), a post-accumulate-grad hook
// per parameter, and buckets launched strictly in index order so every rank issues the same
// sequence of collectives whatever order its autograd threads finish in.
#include "dist/grad_sync.hpp"

#include <sstream>

#include "dist/bucket_hooks.hpp"

namespace trainer::dist {

GradSync::GradSync(Group& group, std::vector<torch::Tensor> params, double bucket_mb) : group_(group) {
  for (auto& p : params)
    if (p.defined() && p.requires_grad()) params_.push_back(p);
  build_buckets(bucket_mb);
  if (!group_.active()) return;

  // same bucket order on every rank of the group, or the collectives pair up the wrong buffers (or hang)
  if (auto m = find_layout_mismatch(group_, layout_hash_, "grad bucket layout")) {
    const auto ranks = group_.ranks();  // the message names world ranks
    std::ostringstream msg;
    msg << "rank " << ranks[static_cast<size_t>(group_.rank())] << ": gradient bucket layout differs between ranks: rank "
        << ranks[0] << " has " << std::hex << m->rank0_hash << ", rank " << std::dec
        << ranks[static_cast<size_t>(m->rank)] << " has " << std::hex << m->rank_hash
        << " (different model or dist.bucket_mb)";
    throw DistError(msg.str());
  }
  for (size_t i = 0; i < params_.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<GradReadyHook<GradSync>>(this, i));
  hooked_ = true;
  reset_step();
}

GradSync::~GradSync() {
  // by the hooks installed, not by group_.active(): a regrouped job can shrink to one rank
  if (!hooked_) return;
  for (auto& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradSync::build_buckets(double bucket_mb) {
  plan_reverse_buckets(params_, bucket_mb, buckets_, bucket_of_);
  ready_.assign(params_.size(), false);
  uint64_t h = 1469598103934665603ull;
  h = layout_fnv1a(h, static_cast<int64_t>(buckets_.size()));
  for (auto& b : buckets_) {
    const auto& first = params_[b.params.front()];
    b.flat = torch::zeros({b.numel}, first.options().requires_grad(false));
    h = layout_fnv1a(h, static_cast<int64_t>(b.params.size()));
    for (size_t j = 0; j < b.params.size(); ++j) {
      h = layout_fnv1a(h, static_cast<int64_t>(b.params[j]));
      h = layout_fnv1a(h, params_[b.params[j]].numel());
      h = layout_fnv1a(h, static_cast<int64_t>(params_[b.params[j]].scalar_type()));
    }
  }
  layout_hash_ = h;
}

void GradSync::set_enabled(bool sync) {
  std::lock_guard<std::mutex> lk(mu_);
  enabled_ = sync;
}

void GradSync::reset_step() {
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.op.reset();
  }
  next_launch_ = 0;
}

void GradSync::on_grad_ready(size_t index) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!enabled_ || !group_.active() || ready_[index]) return;
  ready_[index] = true;
  auto& b = buckets_[bucket_of_[index]];
  if (--b.pending == 0) launch_ready_buckets();
}

void GradSync::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

void GradSync::launch(size_t bi) {
  torch::NoGradGuard no_grad;
  auto& b = buckets_[bi];
  for (size_t j = 0; j < b.params.size(); ++j) {
    const auto& p = params_[b.params[j]];
    auto slot = b.flat.narrow(0, b.offsets[j], p.numel());
    if (p.grad().defined())
      slot.copy_(p.grad().reshape({-1}));
    else
      slot.zero_();  // a parameter unused this step contributes zeros, like torch DDP's find_unused
  }
  b.op = group_.all_reduce_sum_async(b.flat, "grad bucket " + std::to_string(bi + 1) + "/" +
                                                 std::to_string(buckets_.size()));
}

void GradSync::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!enabled_ || !group_.active()) return;
  // buckets whose gradients never all arrived (unused parameters) go now, still in index order
  launched_in_backward_ = static_cast<int64_t>(next_launch_);
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
  torch::NoGradGuard no_grad;
  const double inv = 1.0 / static_cast<double>(group_.size());  // the mean over the group, not the world
  for (auto& b : buckets_) {
    b.op->wait();
    b.flat.mul_(inv);
    for (size_t j = 0; j < b.params.size(); ++j) {
      auto& p = params_[b.params[j]];
      auto avg = b.flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(avg);
      else
        p.mutable_grad() = avg.clone();
    }
  }
  reset_step();
}

}  // namespace trainer::dist
