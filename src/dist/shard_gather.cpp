// ShardSync's dist.sharding full half (see shard_sync.hpp): gathering a unit's parameters for its
// forward and backward, freeing them in between, and the prefetch that overlaps the next unit's
// all-gather with this unit's compute.
//
// Why freeing the storage is safe for autograd: the model's parameters, and every tensor autograd
// saved of them (a weight, its transpose), view the bucket's full buffer through one StorageImpl.
// Freeing swaps that storage's memory for none; the backward re-gather swaps fresh memory in and
// the all-gather fills it before the unit's backward runs, so the saved tensors read the same values
// again. Neither the swap nor a collective's write bumps a version counter, so autograd's in-place
// check stays quiet (a tensor.copy_ would bump it and fail the backward). Nothing reads a unit's
// parameters after all of its gradients are accumulated: every node that reads a parameter also
// sends a gradient to it, and AccumulateGrad runs only once all of them have.
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <string>

#include "dist/shard_sync.hpp"

namespace trainer::dist {

// A block handed out by the pool; its DataPtr's context. The pool stays alive while a block is out.
struct UnitBufferPool::Block {
  std::shared_ptr<UnitBufferPool> pool;
  void* ptr = nullptr;
  size_t bytes = 0;
};

UnitBufferPool::~UnitBufferPool() {
  for (auto& [bytes, ptr] : free_) c10::free_cpu(ptr);
}

at::DataPtr UnitBufferPool::take(const std::shared_ptr<UnitBufferPool>& pool, size_t bytes) {
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lk(pool->mu_);
    auto it = pool->free_.find(bytes);
    if (it != pool->free_.end()) {
      ptr = it->second;
      pool->free_.erase(it);
    }
  }
  if (!ptr) ptr = c10::alloc_cpu(bytes);
  auto* block = new Block{pool, ptr, bytes};
  return at::DataPtr(ptr, block, &UnitBufferPool::give_back, at::Device(at::kCPU));
}

torch::Tensor UnitBufferPool::zeros(const std::shared_ptr<UnitBufferPool>& pool, int64_t n,
                                    const torch::TensorOptions& o) {
  if (!o.device().is_cpu()) return torch::zeros({n}, o);
  const size_t bytes = static_cast<size_t>(n) * c10::elementSize(c10::typeMetaToScalarType(o.dtype()));
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, take(pool, bytes), /*allocator=*/nullptr,
                       /*resizable=*/false);
  return torch::empty({0}, o).set_(storage, 0, {n}, {1}).zero_();
}

void UnitBufferPool::give_back(void* ctx) {
  std::unique_ptr<Block> block(static_cast<Block*>(ctx));
  std::lock_guard<std::mutex> lk(block->pool->mu_);
  block->pool->free_.emplace(block->bytes, block->ptr);
}

namespace {

// Gives `flat`'s storage `nbytes` of fresh memory (its contents undefined), or none for 0. On CUDA
// the caching allocator of the current stream; on CPU the pool's, which hands the same blocks out
// again: malloc would return a freed unit of tens of MB to its heap, where the step's other
// allocations fragment it, and the resident set grew by a few units' worth every step (measured:
// docs/PERFORMANCE.md).
void set_storage_bytes(const torch::Tensor& flat, size_t nbytes, const std::shared_ptr<UnitBufferPool>& pool) {
  auto* impl = flat.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == nbytes) return;
  if (nbytes == 0)
    impl->set_data_ptr_noswap(at::DataPtr(nullptr, impl->device()));
  else if (impl->device().is_cpu())
    impl->set_data_ptr_noswap(UnitBufferPool::take(pool, nbytes));
  else
    impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
}

}  // namespace

int64_t ShardSync::unit_bucket(size_t unit) const {
  return unit < unit_bucket_.size() ? unit_bucket_[unit] : -1;
}

void ShardSync::gather_async(size_t bi) {
  auto& b = buckets_[bi];
  if (b.state != ShardBucket::State::Freed) return;
  set_storage_bytes(b.flat_param, static_cast<size_t>(b.padded) * b.flat_param.element_size(), pool_);
  now_.bytes += static_cast<int64_t>(b.flat_param.nbytes());
  now_.units += 1;
  peak_.bytes = std::max(peak_.bytes, now_.bytes);
  peak_.units = std::max(peak_.units, now_.units);
  // the input is the rank's own chunk, a tensor of its own: no input aliases its output
  b.gather_op = group_.all_gather_into_async(b.flat_param, b.shard_param,
                                             "unit params " + std::to_string(bi + 1) + "/" + std::to_string(buckets_.size()));
  b.state = ShardBucket::State::Gathering;
}

void ShardSync::ensure_gathered(size_t bi) {
  auto& b = buckets_[bi];
  if (b.state == ShardBucket::State::Freed) gather_async(bi);
  if (b.state == ShardBucket::State::Gathering) {
    b.gather_op->wait();
    b.gather_op.reset();
    b.state = ShardBucket::State::Held;
  }
}

void ShardSync::free_params(size_t bi) {
  auto& b = buckets_[bi];
  if (b.state == ShardBucket::State::Gathering) b.gather_op->wait();  // the collective still writes it
  b.gather_op.reset();
  if (b.state != ShardBucket::State::Freed && b.flat_param.storage().nbytes() > 0) {
    now_.bytes -= static_cast<int64_t>(b.flat_param.nbytes());
    now_.units -= 1;
  }
  set_storage_bytes(b.flat_param, 0, pool_);
  b.state = ShardBucket::State::Freed;
}

// A unit's gradients, complete for this micro-step, reduce-scattered: the first micro-step's
// straight into shard_grad, a later one's into a chunk of its own, summed in by settle(). The
// reduce-scatters launched before this one are settled first (normally one, launched as backward
// left the previous unit and overlapped with this unit's backward): so at most one unit's whole
// gradient buffer is in flight besides this one, on every micro-step.
void ShardSync::launch_full(size_t bi) {
  torch::NoGradGuard no_grad;
  for (size_t j = 0; j <= bi; ++j) settle(buckets_[j]);
  auto& b = buckets_[bi];
  b.flat_grad = UnitBufferPool::zeros(pool_, b.padded, b.flat_param.options());
  for (size_t j = 0; j < b.params.size(); ++j) {
    auto& p = params_[b.params[j]];
    auto slot = b.flat_grad.as_strided(p.sizes(), p.strides(), b.offsets[j]);
    if (p.grad().defined()) slot.copy_(p.grad());  // unused this micro-step: the zeros stay
    p.mutable_grad() = torch::Tensor();
  }
  b.rs_out = b.has_grad ? torch::empty({b.chunk}, b.shard_grad.options()) : b.shard_grad;
  b.has_grad = true;
  b.op = group_.reduce_scatter_sum_async(b.rs_out, b.flat_grad,
                                         "unit grads " + std::to_string(bi + 1) + "/" + std::to_string(buckets_.size()));
}

void ShardSync::settle(ShardBucket& b) {
  if (!b.op) return;
  b.op->wait();
  b.op.reset();
  b.flat_grad = torch::Tensor();
  if (!b.rs_out.is_same(b.shard_grad)) b.shard_grad.add_(b.rs_out);
  b.rs_out = torch::Tensor();
}

void ShardSync::unit_enter(size_t unit) {
  std::lock_guard<std::mutex> lk(mu_);
  if (unit == 0) {  // a new forward: its backward launches the buckets in order from the first again
    leave_order_.clear();
    if (torch::GradMode::is_enabled()) {
      next_launch_ = 0;
      torch::NoGradGuard no_grad;
      for (auto& b : buckets_) settle(b);  // the previous micro-step's last reduce-scatter: no buffer lingers
    }
  }
  if (const int64_t bi = unit_bucket(unit); bi >= 0) {
    auto& b = buckets_[static_cast<size_t>(bi)];
    if (torch::GradMode::is_enabled()) {  // a backward follows: count this unit's gradients afresh
      b.pending = b.params.size();
      for (size_t k : b.params) ready_[k] = false;
    }
    ensure_gathered(static_cast<size_t>(bi));
  }
  for (size_t next = unit + 1; next < unit_bucket_.size(); ++next)  // prefetch the next unit with parameters
    if (unit_bucket_[next] >= 0) {
      gather_async(static_cast<size_t>(unit_bucket_[next]));
      break;
    }
}

torch::Tensor ShardSync::unit_leave(size_t unit, torch::Tensor y) {
  std::lock_guard<std::mutex> lk(mu_);
  const int64_t bi = unit_bucket(unit);
  if (bi < 0 || hold_depth_ > 0) return y;
  free_params(static_cast<size_t>(bi));
  if (torch::GradMode::is_enabled() && y.requires_grad()) {
    leave_order_.push_back(unit);
    // runs when y's gradient is complete, before the nodes of this unit's backward
    y.register_hook([this, unit](const torch::Tensor&) { unit_backward(unit); });
  }
  return y;
}

void ShardSync::unit_backward(size_t unit) {
  std::lock_guard<std::mutex> lk(mu_);
  const int64_t bi = unit_bucket(unit);
  if (bi < 0) return;
  ensure_gathered(static_cast<size_t>(bi));
  // backward reaches the units in reverse leave order: prefetch the one left before this one
  auto it = std::find(leave_order_.rbegin(), leave_order_.rend(), unit);
  if (it != leave_order_.rend() && std::next(it) != leave_order_.rend())
    if (const int64_t prev = unit_bucket(*std::next(it)); prev >= 0) gather_async(static_cast<size_t>(prev));
}

// Nested holds (a save inside a scope that holds already) release at the outermost one.
void ShardSync::gather_all() {
  std::lock_guard<std::mutex> lk(mu_);
  if (mode_ != Grads::Full) return;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) gather_async(bi);  // all in flight at once
  for (size_t bi = 0; bi < buckets_.size(); ++bi) ensure_gathered(bi);
  ++hold_depth_;
}

void ShardSync::release_all(bool written) {
  std::lock_guard<std::mutex> lk(mu_);
  if (mode_ != Grads::Full || hold_depth_ == 0) return;
  torch::NoGradGuard no_grad;
  for (auto& b : buckets_)
    if (written && b.state == ShardBucket::State::Held)
      b.shard_param.copy_(b.flat_param.narrow(0, rank_ * b.chunk, b.chunk));
  if (--hold_depth_ > 0) return;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) free_params(bi);
}

}  // namespace trainer::dist
