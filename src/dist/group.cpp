// Group: a mesh dimension's process group (see group.hpp), built by DistContext::new_group.
#include "dist/group.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>

#include "dist/dist_impl.hpp"
#include "dist/nccl_backend.hpp"

namespace trainer::dist {

struct Group::Backend {
  DistContext::Impl* impl = nullptr;  // the world's: store, watchdog, failure flag
  c10::intrusive_ptr<c10d::Backend> pg;
};

namespace {

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// Runs one collective to completion under the world's watchdog; any failure becomes a DistError.
template <typename Launch>
void run_collective(DistContext::Impl& impl, const OpInfo& info, Launch&& fn) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = fn();
  } catch (const std::exception& e) {
    impl.failed = true;
    throw DistError(impl.describe(info) + " could not be launched: " + error_text(e));
  }
  impl.wait(work, info);
}

}  // namespace

std::unique_ptr<Group> DistContext::new_group(const std::vector<int64_t>& ranks, const std::string& name) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (ranks.empty() || me == ranks.end() || !std::is_sorted(ranks.begin(), ranks.end()) ||
      std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end() || ranks.back() >= world_size_ || ranks[0] < 0)
    throw DistError("rank " + std::to_string(rank_) + ": group " + name + " of ranks [" + rank_list(ranks) +
                    "]: expected distinct ascending ranks of the world (" + std::to_string(world_size_) +
                    ") including this one");
  std::unique_ptr<Group> g(new Group());
  g->ctx_ = this;
  g->name_ = name;
  g->ranks_ = ranks;
  g->rank_ = me - ranks.begin();
  g->backend_ = std::make_unique<Group::Backend>();
  g->backend_->impl = impl_.get();
  if (ranks.size() == 1) return g;                          // a group of one: no collective at all
  if (static_cast<int64_t>(ranks.size()) == world_size_) {  // the whole world: its own backend
    g->backend_->pg = impl_->backend;
    return g;
  }
  // The subgroup meets under its own store prefix: its ranks alone take part in the rendezvous.
  auto store = c10::make_intrusive<c10d::PrefixStore>(impl_->key_ns + "group/" + name + "[" + rank_list(ranks) + "]/",
                                                      impl_->store);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  const int size = static_cast<int>(ranks.size());
  try {
    g->backend_->pg = impl_->backend_name == "nccl"
                          ? make_nccl_backend(store, static_cast<int>(g->rank_), size, timeout,
                                              static_cast<int>(device_.index() < 0 ? local_rank_ : device_.index()))
                          : make_gloo_backend(store, g->rank_, size, impl_->net, timeout);
  } catch (const std::exception& e) {
    impl_->failed = true;
    throw DistError("rank " + std::to_string(rank_) + ": creating the " + impl_->backend_name + " group " + name +
                    " of ranks [" + rank_list(ranks) + "] failed: " + error_text(e));
  }
  g->owns_ = true;
  return g;
}

Group::~Group() {
  // as the world's: a broken backend may block in its destructor, and the process ends anyway
  if (backend_ && backend_->impl && backend_->impl->failed && owns_) (void)backend_->pg.release();
}

void Group::all_reduce(torch::Tensor& t, Reduce op, const std::string& what) {
  if (!active()) return;
  auto& impl = *backend_->impl;
  OpInfo info{name_ + " all_reduce", seq_++, ctx_->step(), what};
  std::vector<at::Tensor> v{t.is_contiguous() ? t : t.contiguous()};
  c10d::AllreduceOptions o;
  o.reduceOp = op == Reduce::Sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
  run_collective(impl, info, [&] { return backend_->pg->allreduce(v, o); });
  if (!v[0].is_same(t)) t.copy_(v[0]);
}

torch::Tensor Group::all_gather(const torch::Tensor& t, int64_t dim, const std::string& what) {
  if (!active()) return t;
  auto& impl = *backend_->impl;
  dim = dim < 0 ? dim + t.dim() : dim;
  OpInfo info{name_ + " all_gather", seq_++, ctx_->step(), what};
  // c10d's flat form: the output is the inputs one after another along dim 0
  auto in = t.dim() == 0 ? t.reshape({1}) : t.contiguous();
  auto shape = in.sizes().vec();
  shape[0] *= size();
  auto out = torch::empty(shape, in.options());
  run_collective(impl, info, [&] { return backend_->pg->_allgather_base(out, in, c10d::AllgatherOptions{}); });
  if (dim == 0) return out;
  return torch::cat(out.chunk(size(), 0), dim);
}

torch::Tensor Group::reduce_scatter(const torch::Tensor& t, int64_t dim, const std::string& what) {
  dim = dim < 0 ? dim + t.dim() : dim;
  if (t.size(dim) % size() != 0)
    throw DistError("rank " + std::to_string(ctx_->rank()) + ": " + name_ + " reduce_scatter (" + what + "): size " +
                    std::to_string(t.size(dim)) + " of dim " + std::to_string(dim) + " does not divide by the group's " +
                    std::to_string(size()) + " ranks");
  if (!active()) return t;
  auto& impl = *backend_->impl;
  OpInfo info{name_ + " reduce_scatter", seq_++, ctx_->step(), what};
  // chunk r along `dim` goes to rank r: c10d's flat form lays the chunks out one after another
  // along dim 0, in rank order
  auto in = dim == 0 ? t.contiguous() : torch::cat(t.chunk(size(), dim), 0).contiguous();
  auto shape = in.sizes().vec();
  shape[0] /= size();
  auto out = torch::empty(shape, in.options());
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  run_collective(impl, info, [&] { return backend_->pg->_reduce_scatter_base(out, in, o); });
  return out;
}

}  // namespace trainer::dist
