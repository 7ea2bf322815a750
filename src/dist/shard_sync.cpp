// ShardSync: see shard_sync.hpp. Bucketing and hook ordering follow GradSync (grad_sync.cpp): the
// same reverse registration order and bucket cap, buckets launched strictly in index order so that
// every rank issues the same sequence of collectives.
#include "dist/shard_sync.hpp"

#include <sstream>
#include <unordered_set>

#include "dist/bucket_hooks.hpp"

namespace trainer::dist {
namespace {

// The strides a parameter keeps inside the flat buffer: its own when it is dense (channels-last
// weights stay channels-last), else plain row-major.
std::vector<int64_t> storage_strides(const torch::Tensor& p) {
  if (p.is_non_overlapping_and_dense()) return p.strides().vec();
  std::vector<int64_t> s(static_cast<size_t>(p.dim()), 1);
  for (int64_t d = p.dim() - 2; d >= 0; --d) s[static_cast<size_t>(d)] = s[static_cast<size_t>(d + 1)] * p.size(d + 1);
  return s;
}

torch::Tensor slot_of(const torch::Tensor& flat, const torch::Tensor& p, int64_t offset) {
  return flat.as_strided(p.sizes(), storage_strides(p), flat.storage_offset() + offset);
}

}  // namespace

ShardSync::ShardSync(Group& group, std::vector<torch::Tensor> params, double bucket_mb, Grads mode,
                     std::vector<std::vector<size_t>> units, const Aligned& aligned)
    : group_(group), mode_(mode), world_(group.size()), rank_(group.rank()) {
  if (mode == Grads::Full) {
    for (auto& p : params)
      if (!p.defined() || !p.requires_grad()) throw std::invalid_argument("ShardSync full: a unit parameter is frozen");
    params_ = std::move(params);
    plan_units(units);
  } else {
    for (auto& p : params)
      if (p.defined() && p.requires_grad()) params_.push_back(p);
    build(bucket_mb);
  }
  align_slots(aligned);
  allocate();
  check_layout();
  for (size_t i = 0; i < params_.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<GradReadyHook<ShardSync>>(this, i));
  reset_step();
}

ShardSync::~ShardSync() {
  for (auto& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void ShardSync::build(double bucket_mb) {
  plan_reverse_buckets(params_, bucket_mb, buckets_, bucket_of_);
  ready_.assign(params_.size(), false);
}

// One bucket per unit with trainable parameters, the last unit first: backward finishes the units
// in reverse forward order, and buckets launch in index order.
void ShardSync::plan_units(const std::vector<std::vector<size_t>>& units) {
  bucket_of_.assign(params_.size(), 0);
  ready_.assign(params_.size(), false);
  unit_bucket_.assign(units.size(), -1);
  std::vector<bool> seen(params_.size(), false);
  for (size_t u = units.size(); u-- > 0;) {
    if (units[u].empty()) continue;
    unit_bucket_[u] = static_cast<int64_t>(buckets_.size());
    auto& b = buckets_.emplace_back();
    for (size_t k : units[u]) {
      if (k >= params_.size() || seen[k]) throw std::invalid_argument("ShardSync full: the units do not partition the parameters");
      seen[k] = true;
      const auto& first = params_[units[u].front()];
      if (params_[k].scalar_type() != first.scalar_type() || params_[k].device() != first.device())
        throw std::invalid_argument("ShardSync full: a unit mixes dtypes or devices");
      b.params.push_back(k);
      b.offsets.push_back(b.numel);
      b.numel += params_[k].numel();
      bucket_of_[k] = buckets_.size() - 1;
    }
  }
  for (size_t k = 0; k < params_.size(); ++k)
    if (!seen[k]) throw std::invalid_argument("ShardSync full: a trainable parameter is in no unit");
}

void ShardSync::align_slots(const Aligned& aligned) {
  if (aligned.empty()) return;
  for (auto& b : buckets_) {
    int64_t end = 0;
    for (size_t j = 0; j < b.params.size(); ++j) {
      const auto& p = params_[b.params[j]];
      if (aligned.count(p.unsafeGetTensorImpl())) {
        end = (end + kPieceAlign - 1) / kPieceAlign * kPieceAlign;  // the gap before it stays zeros
        b.align = kPieceAlign;
      }
      b.offsets[j] = end;
      end += p.numel();
    }
    b.numel = end;
  }
}

// The buffers of the planned buckets; the parameters move into them, and their pieces are found.
void ShardSync::allocate() {
  torch::NoGradGuard no_grad;
  uint64_t h = layout_fnv1a(1469598103934665603ull, static_cast<int64_t>(buckets_.size()));
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    auto& b = buckets_[bi];
    const auto& first = params_[b.params.front()];
    const auto opts = first.options().requires_grad(false);
    const int64_t unit = world_ * b.align;
    b.padded = (b.numel + unit - 1) / unit * unit;  // shapes that do not divide are padded, never refused
    b.chunk = b.padded / world_;
    b.flat_param = torch::zeros({b.padded}, opts);
    b.shard_grad = torch::zeros({b.chunk}, opts);
    if (mode_ == Grads::AllReduce) b.flat_grad = torch::zeros({b.padded}, opts);
    const int64_t lo = rank_ * b.chunk, hi = lo + b.chunk;
    for (size_t j = 0; j < b.params.size(); ++j) {
      auto& p = params_[b.params[j]];
      auto view = slot_of(b.flat_param, p, b.offsets[j]);
      view.copy_(p.detach());
      p.set_data(view);  // the model's tensor now lives in the bucket: the all-gather updates it in place
      const int64_t start = std::max(lo, b.offsets[j]), end = std::min(hi, b.offsets[j] + p.numel());
      if (start < end)
        pieces_.push_back(OwnedPiece{b.params[j], bi, start - b.offsets[j], end - start, start - lo, {}});
      h = layout_fnv1a(h, static_cast<int64_t>(b.params[j]));
      h = layout_fnv1a(h, p.numel());
      h = layout_fnv1a(h, b.offsets[j]);
      h = layout_fnv1a(h, static_cast<int64_t>(p.scalar_type()));
    }
    // full: the rank's own chunk is the parameters' home; the full buffer is a gather target, freed
    // at once (one unit at a time, not the whole model, is built whole at start-up)
    if (mode_ == Grads::Full) {
      b.shard_param = b.flat_param.narrow(0, lo, b.chunk).clone();
      now_.bytes += b.flat_param.nbytes(), now_.units += 1;
      free_params(bi);
    }
  }
  for (auto& pc : pieces_) {
    const auto& b = buckets_[pc.bucket];
    pc.value = mode_ == Grads::Full ? b.shard_param.narrow(0, pc.chunk_offset, pc.len)
                                    : b.flat_param.narrow(0, rank_ * b.chunk + pc.chunk_offset, pc.len);
  }
  if (mode_ == Grads::Full) {
    h = layout_fnv1a(h, 3);
  }
  layout_hash_ = h;
}

void ShardSync::check_layout() {
  if (auto m = find_layout_mismatch(group_, layout_hash_, "shard layout")) {
    const auto ranks = group_.ranks();  // the message names world ranks
    std::ostringstream msg;
    msg << "rank " << ranks[static_cast<size_t>(rank_)] << ": the sharded parameter layout differs between ranks "
        << ranks[0] << " and " << ranks[static_cast<size_t>(m->rank)] << " (different model or dist.bucket_mb)";
    throw DistError(msg.str());
  }
}

std::vector<torch::Tensor> ShardSync::piece_values() const {
  std::vector<torch::Tensor> out;
  for (const auto& pc : pieces_) out.push_back(pc.value);
  return out;
}

void ShardSync::set_enabled(bool sync) {
  std::lock_guard<std::mutex> lk(mu_);
  enabled_ = sync;
}

void ShardSync::reset_step() {
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.op.reset();
    b.has_grad = false;
  }
  next_launch_ = 0;
}

void ShardSync::on_grad_ready(size_t index) {
  std::lock_guard<std::mutex> lk(mu_);
  // full counts on every micro-step: a unit's parameters are freed once its gradients are in; but
  // not while they are held (gather_all: a pipeline's schedule runs all its microbatches over them),
  // when the gradients accumulate whole in .grad and finish() reduce-scatters every bucket
  if (mode_ == Grads::Full && hold_depth_ > 0) return;
  if (ready_[index] || (!enabled_ && mode_ != Grads::Full)) return;
  ready_[index] = true;
  const size_t bi = bucket_of_[index];
  if (--buckets_[bi].pending != 0) return;
  if (mode_ == Grads::Full) free_params(bi);        // autograd has run every node that reads them
  if (!enabled_ && mode_ != Grads::Full) return;  // (full reduce-scatters on every micro-step)
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

void ShardSync::launch(size_t bi) {
  if (mode_ == Grads::Full) return launch_full(bi);
  torch::NoGradGuard no_grad;
  auto& b = buckets_[bi];
  // reduce_scatter: the full-size buffer exists only from here until finish() (ZeRO-2, ZeRO-3)
  if (mode_ != Grads::AllReduce) b.flat_grad = torch::zeros({b.padded}, b.flat_param.options());
  for (size_t j = 0; j < b.params.size(); ++j) {
    auto& p = params_[b.params[j]];
    auto slot = slot_of(b.flat_grad, p, b.offsets[j]);
    if (p.grad().defined())
      slot.copy_(p.grad());
    else
      slot.zero_();  // unused this step: zeros, like torch DDP's find_unused_parameters
    p.mutable_grad() = torch::Tensor();  // the bucket holds it now; the optimizer never reads .grad of a parameter
  }
  const std::string what = "shard bucket " + std::to_string(bi + 1) + "/" + std::to_string(buckets_.size());
  b.op = mode_ == Grads::AllReduce ? group_.all_reduce_sum_async(b.flat_grad, what)
                                   : group_.reduce_scatter_sum_async(b.shard_grad, b.flat_grad, what);
}

void ShardSync::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!enabled_) return;
  while (next_launch_ < buckets_.size()) launch(next_launch_++);  // buckets with unused parameters
  torch::NoGradGuard no_grad;
  const double inv = 1.0 / static_cast<double>(world_);
  for (auto& b : buckets_) {
    if (mode_ == Grads::Full) {
      settle(b);
      b.shard_grad.mul_(inv);
      continue;
    }
    b.op->wait();
    if (mode_ == Grads::AllReduce)
      b.shard_grad.copy_(b.flat_grad.narrow(0, rank_ * b.chunk, b.chunk));
    else
      b.flat_grad = torch::Tensor();  // ZeRO-2 and 3 keep only the shard
    b.shard_grad.mul_(inv);
  }
  if (mode_ == Grads::Full) {  // units whose gradients never all came (unused or frozen paths)
    for (size_t bi = 0; bi < buckets_.size(); ++bi) free_params(bi);
    leave_order_.clear();
  }
  for (const auto& pc : pieces_) {
    // the slice's memory, but not an autograd view: Optimizer::zero_grad detach_()es gradients,
    // which a view refuses
    const auto& sg = buckets_[pc.bucket].shard_grad;
    auto g = torch::empty({0}, sg.options());
    g.set_(sg.storage(), sg.storage_offset() + pc.chunk_offset, {pc.len}, {1});
    pc.value.mutable_grad() = g;
  }
  reset_step();
}

void ShardSync::gather_params() {
  if (mode_ == Grads::Full) return;  // each forward gathers its units
  torch::NoGradGuard no_grad;
  std::vector<std::shared_ptr<AsyncOp>> ops;
  std::vector<torch::Tensor> inputs;  // alive until the collectives are done
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    auto& b = buckets_[bi];
    // the input is a copy: an input aliasing its own output is not allowed by every backend
    inputs.push_back(b.flat_param.narrow(0, rank_ * b.chunk, b.chunk).clone());
    ops.push_back(group_.all_gather_into_async(b.flat_param, inputs.back(),
                                               "shard params " + std::to_string(bi + 1) + "/" +
                                                   std::to_string(buckets_.size())));
  }
  for (auto& op : ops) op->wait();
}

int64_t ShardSync::param_bytes() const {
  int64_t n = 0;
  for (const auto& b : buckets_) {
    // full: the chunk, plus the full buffer's storage only while the unit is gathered
    if (mode_ == Grads::Full) n += b.shard_param.nbytes() + static_cast<int64_t>(b.flat_param.storage().nbytes());
    else n += b.flat_param.nbytes();
  }
  return n;
}

int64_t ShardSync::grad_bytes() const {
  int64_t n = 0;
  for (const auto& b : buckets_) {
    if (b.flat_grad.defined()) n += b.flat_grad.nbytes();
    n += b.shard_grad.nbytes();
  }
  for (const auto& p : params_)
    if (p.grad().defined()) n += p.grad().nbytes();
  return n;
}

}  // namespace trainer::dist
