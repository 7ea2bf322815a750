// Group: a mesh dimension's process group, or the world's (see group.hpp), built by
// DistContext::new_group / world_group. Every collective of the project but the config-hash gather
// runs here: DistContext's own are its world group's.
#include "dist/group.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "dist/stop_aware_store.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "dist/dist_impl.hpp"
#include "dist/nccl_backend.hpp"
#include "io/weight_copy.hpp"

namespace trainer::dist {

struct Group::Backend {
  DistContext::Impl* impl = nullptr;       // the world's: store, watchdog, failure flag
  c10::intrusive_ptr<c10d::Backend> own;   // a subgroup's
  bool world = false;                      // the world's backend of the moment (a regroup replaces it)
  c10d::Backend& pg() { return world ? *impl->backend : *own; }
};

// One collective about to launch: its forensics, and where it goes.
struct Group::Op {
  DistContext::Impl& impl;
  c10d::Backend& pg;
  OpInfo info;
  bool world;
  template <typename Launch>
  std::shared_ptr<AsyncOp> launch(Launch&& fn) {
    auto work = impl.launch(info, [&] { return fn(pg); }, world);
    return std::make_shared<WorkOp>(&impl, std::move(work), std::move(info));
  }
};

namespace {

std::string rank_list(const std::vector<int64_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {  // appends, not "," + string (GCC 12's -Wstringop-overflow)
    if (i) s += ',';
    s += std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

std::unique_ptr<Group> DistContext::world_view(const std::string& name) {
  std::unique_ptr<Group> g(new Group());
  g->ctx_ = this;
  g->name_ = name;
  g->world_ = true;
  g->backend_ = std::make_unique<Group::Backend>();
  g->backend_->impl = impl_.get();
  g->backend_->world = true;
  return g;
}

std::unique_ptr<Group> DistContext::new_group(const std::vector<int64_t>& ranks, const std::string& name) {
  const auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (ranks.empty() || me == ranks.end() || !std::is_sorted(ranks.begin(), ranks.end()) ||
      std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end() || ranks.back() >= world_size_ || ranks[0] < 0)
    throw DistError("rank " + std::to_string(rank_) + ": group " + name + " of ranks [" + rank_list(ranks) +
                    "]: expected distinct ascending ranks of the world (" + std::to_string(world_size_) +
                    ") including this one");
  // the whole world: the world itself (its backend, numbering and messages; it follows a regroup)
  if (static_cast<int64_t>(ranks.size()) == world_size_) return world_view(name);
  std::unique_ptr<Group> g(new Group());
  g->ctx_ = this;
  g->name_ = name;
  g->ranks_ = ranks;
  g->rank_ = me - ranks.begin();
  g->backend_ = std::make_unique<Group::Backend>();
  g->backend_->impl = impl_.get();
  if (ranks.size() == 1) return g;  // a group of one: no collective at all
  // The subgroup meets under its own store prefix: its ranks alone take part in the rendezvous.
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<StopAwareStore>(c10::make_intrusive<c10d::PrefixStore>(
      impl_->key_ns + "group/" + name + "[" + rank_list(ranks) + "]/", impl_->store));
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
  const int size = static_cast<int>(ranks.size());
  try {
    g->backend_->own = impl_->backend_name == "nccl"
                           ? make_nccl_backend(store, static_cast<int>(g->rank_), size, timeout,
                                               static_cast<int>(device_.index() < 0 ? local_rank_ : device_.index()))
                           : make_gloo_backend(store, g->rank_, size, impl_->net, timeout);
  } catch (const std::exception& e) {
    impl_->failed = true;
    if (is_rendezvous_stop(e)) throw RendezvousStopped(error_text(e));
    throw DistError("rank " + std::to_string(rank_) + ": creating the " + impl_->backend_name + " group " + name +
                    " of ranks [" + rank_list(ranks) + "] failed: " + error_text(e));
  }
  g->owns_ = true;
  return g;
}

Group::~Group() {
  // as the world's: a broken backend may block in its destructor, and the process ends anyway
  if (backend_ && backend_->impl && backend_->impl->failed && owns_) (void)backend_->own.release();
}

int64_t Group::rank() const { return world_ ? ctx_->rank() : rank_; }
int64_t Group::size() const { return world_ ? ctx_->world_size() : static_cast<int64_t>(ranks_.size()); }
const torch::Device& Group::device() const { return ctx_->device(); }

std::vector<int64_t> Group::ranks() const {
  if (!world_) return ranks_;
  std::vector<int64_t> all(static_cast<size_t>(size()));
  std::iota(all.begin(), all.end(), int64_t{0});
  return all;
}

// The world's collectives take the context's sequence numbers and plain names ("all_reduce #12"),
// a subgroup's its own and its name ("dp all_reduce #3"): the failure messages say which.
Group::Op Group::begin(const char* op, const std::string& what) {
  ++count_;
  const uint64_t seq = world_ ? ctx_->seq_++ : seq_++;
  return Op{*backend_->impl, backend_->pg(), OpInfo{world_ ? op : name_ + " " + op, seq, ctx_->step(), what}, world_};
}

// --- launched now ------------------------------------------------------------------------------

std::shared_ptr<AsyncOp> Group::all_reduce_async(torch::Tensor t, Reduce op, const std::string& what) {
  if (!active()) return std::make_shared<DoneOp>();
  std::vector<at::Tensor> v{std::move(t)};
  c10d::AllreduceOptions o;
  o.reduceOp = op == Reduce::Sum ? c10d::ReduceOp::SUM : c10d::ReduceOp::MAX;
  return begin("all_reduce", what).launch([&](c10d::Backend& pg) { return pg.allreduce(v, o); });
}

std::shared_ptr<AsyncOp> Group::all_reduce_sum_async(torch::Tensor t, const std::string& what) {
  return all_reduce_async(std::move(t), Reduce::Sum, what);
}

std::shared_ptr<AsyncOp> Group::reduce_scatter_sum_async(torch::Tensor out, torch::Tensor in, const std::string& what) {
  if (!active()) {
    out.copy_(in);
    return std::make_shared<DoneOp>();
  }
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return begin("reduce_scatter", what).launch([&](c10d::Backend& pg) { return pg._reduce_scatter_base(out, in, o); });
}

std::shared_ptr<AsyncOp> Group::all_gather_into_async(torch::Tensor out, torch::Tensor in, const std::string& what) {
  if (!active()) {
    out.copy_(in);
    return std::make_shared<DoneOp>();
  }
  return begin("all_gather", what).launch([&](c10d::Backend& pg) {
    return pg._allgather_base(out, in, c10d::AllgatherOptions{});
  });
}

// --- blocking ----------------------------------------------------------------------------------

// A peer by its group rank and its world rank: a user hunting a stopped process looks for the world's
// (found from outside: "from rank 1" on rank 1 itself, the stopped process being world rank 2)
std::string Group::peer_name(int64_t peer) const {
  const auto all = ranks();
  const auto p = static_cast<size_t>(peer);
  return "group rank " + std::to_string(peer) + (p < all.size() ? " = world rank " + std::to_string(all[p]) : "");
}

std::shared_ptr<AsyncOp> Group::send_async(torch::Tensor t, int64_t peer, int tag, const std::string& what) {
  std::vector<at::Tensor> v{std::move(t)};
  return begin("send", what + " to " + peer_name(peer)).launch([&](c10d::Backend& pg) {
    return pg.send(v, static_cast<int>(peer), tag);
  });
}

std::shared_ptr<AsyncOp> Group::recv_async(torch::Tensor t, int64_t peer, int tag, const std::string& what) {
  std::vector<at::Tensor> v{std::move(t)};
  return begin("recv", what + " from " + peer_name(peer)).launch([&](c10d::Backend& pg) {
    return pg.recv(v, static_cast<int>(peer), tag);
  });
}

void Group::all_reduce(torch::Tensor& t, Reduce op, const std::string& what) {
  if (!active()) return;
  auto v = t.is_contiguous() ? t : t.contiguous();
  all_reduce_async(v, op, what)->wait();
  if (!v.is_same(t)) t.copy_(v);
}

torch::Tensor Group::all_gather(const torch::Tensor& t, int64_t dim, const std::string& what) {
  if (!active()) return t;
  dim = dim < 0 ? dim + t.dim() : dim;
  // c10d's flat form: the output is the inputs one after another along dim 0
  auto in = t.dim() == 0 ? t.reshape({1}) : t.contiguous();
  auto shape = in.sizes().vec();
  shape[0] *= size();
  auto out = torch::empty(shape, in.options());
  all_gather_into_async(out, in, what)->wait();
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
  // chunk r along `dim` goes to rank r: c10d's flat form lays the chunks out one after another
  // along dim 0, in rank order
  auto in = dim == 0 ? t.contiguous() : torch::cat(t.chunk(size(), dim), 0).contiguous();
  auto shape = in.sizes().vec();
  shape[0] /= size();
  auto out = torch::empty(shape, in.options());
  reduce_scatter_sum_async(out, in, what)->wait();
  return out;
}

void Group::broadcast(torch::Tensor& t, const std::string& what) {
  if (!active() || t.numel() == 0) return;
  auto flat = t.to(device()).contiguous().reshape({-1});
  if (flat.scalar_type() == torch::kBool) flat = flat.to(torch::kUInt8);  // Gloo has no bool reductions
  std::vector<at::Tensor> v{flat};
  c10d::BroadcastOptions o;
  o.rootRank = 0;
  begin("broadcast", what).launch([&](c10d::Backend& pg) { return pg.broadcast(v, o); })->wait();
  if (rank() != 0) {
    torch::NoGradGuard ng;
    t.copy_(flat.view(t.sizes()));  // copy_ converts uint8 back to bool
  }
}

void Group::broadcast_module(torch::nn::Module& m, bool buffers_only) {
  if (!active()) return;
  torch::NoGradGuard no_grad;
  // one flat buffer per (dtype, device), in registration order: identical on every rank
  std::vector<torch::Tensor> tensors;
  if (!buffers_only)
    for (auto& p : m.parameters()) tensors.push_back(p);
  for (auto& b : m.buffers()) tensors.push_back(b);
  // at most kChunkBytes per broadcast: one flat copy of a whole large model would double its
  // memory at start-up
  constexpr int64_t kChunkBytes = 64 << 20;
  std::vector<std::pair<std::string, std::vector<torch::Tensor>>> groups;
  std::map<std::string, size_t> index;  // the open chunk of each (dtype, device)
  std::map<std::string, int64_t> filled;
  for (auto& t : tensors) {
    // a released weight (io/weight_copy.hpp): no values to send, none to receive
    if (!t.defined() || t.numel() == 0 || io::is_released(t)) continue;
    std::string key = std::string(c10::toString(t.scalar_type())) + "@" + t.device().str();
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    auto it = index.find(key);
    if (it == index.end() || (filled[key] > 0 && filled[key] + bytes > kChunkBytes)) {
      index[key] = groups.size();
      groups.push_back({key, {}});
      filled[key] = 0;
    }
    groups[index[key]].second.push_back(t);
    filled[key] += bytes;
  }
  for (auto& [key, group] : groups) {
    std::vector<torch::Tensor> flat_parts;
    for (auto& t : group) flat_parts.push_back(t.detach().reshape({-1}));
    auto flat = torch::cat(flat_parts);
    broadcast(flat, "module state " + key);
    int64_t off = 0;
    for (auto& t : group) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

}  // namespace trainer::dist
