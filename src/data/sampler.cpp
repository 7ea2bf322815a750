#include "data/sampler.hpp"

#include <algorithm>
#include <numeric>

#include "data/rng.hpp"

namespace trainer::data {

std::vector<int64_t> epoch_permutation(int64_t n, int64_t seed, int64_t epoch) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), int64_t{0});
  SampleRng rng = make_rng(RngStream::Shuffle, seed, epoch, 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[rng.below(static_cast<uint64_t>(i + 1))]);
  return p;
}

Sampler::Sampler(int64_t size, int64_t batch_size, int64_t rank, int64_t world_size, bool train, int64_t seed,
                 int64_t accumulation)
    : size_(size), batch_(batch_size), rank_(rank), world_(world_size), train_(train), seed_(seed) {
  const int64_t step = batch_ * world_ * std::max<int64_t>(accumulation, 1);
  usable_ = train_ && step > 0 ? size_ - size_ % step : size_;
}

std::optional<BatchPlan> Sampler::next(SamplerPosition& pos) const {
  const int64_t g = global_batch();
  BatchPlan plan;
  if (train_) {
    if (pos.consumed + g > usable_) {  // the ragged tail (short of a whole step) is dropped: next epoch
      ++pos.epoch;
      pos.consumed = 0;
    }
    plan.begin = pos.consumed + rank_ * batch_;
    plan.end = plan.begin + batch_;
  } else {
    if (pos.consumed >= size_) return std::nullopt;
    const int64_t left = std::min(g, size_ - pos.consumed);
    if (left == g) {
      plan.begin = pos.consumed + rank_ * batch_;
      plan.end = plan.begin + batch_;
    } else {  // the last, short global batch: split evenly
      const int64_t base = left / world_, extra = left % world_;
      plan.begin = pos.consumed + rank_ * base + std::min(rank_, extra);
      plan.end = plan.begin + base + (rank_ < extra ? 1 : 0);
    }
  }
  plan.epoch = pos.epoch;
  pos.consumed = std::min(pos.consumed + g, size_);
  plan.after = pos;
  return plan;
}

int64_t Sampler::index_at(int64_t epoch, int64_t p) const { return train_ ? (*permutation(epoch))[p] : p; }

int64_t Sampler::batches_per_epoch() const {
  const int64_t g = global_batch();
  return train_ ? usable_ / g : (size_ + g - 1) / g;
}

std::shared_ptr<const std::vector<int64_t>> Sampler::permutation(int64_t epoch) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [e, p] : cache_)
      if (e == epoch) return p;
  }
  // computed outside the lock: other workers keep using the cached epoch meanwhile
  auto perm = std::make_shared<const std::vector<int64_t>>(epoch_permutation(size_, seed_, epoch));
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [e, p] : cache_)
    if (e == epoch) return p;
  cache_.emplace_back(epoch, perm);
  if (cache_.size() > 2) cache_.erase(cache_.begin());
  return perm;
}

}  // namespace trainer::data
