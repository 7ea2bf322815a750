// Which samples each batch holds. The position in an epoch is counted in GLOBAL samples consumed,
// over all ranks, so the order does not depend on the number of ranks, workers or restarts:
//   train: epoch e visits permutation(seed, e) of all N samples in global batches of
//          G = batch_size x world_size; rank r takes positions [p + r*B, p + (r+1)*B) of the
//          global batch starting at p. An optimizer step (A = grad_accum batches of G) never
//          straddles two epochs: an epoch is the first floor(N / (G x A)) x G x A positions, the
//          ragged tail of the permutation is dropped (each epoch visits a different tail, so no
//          sample is dropped systematically) and the next epoch starts. G x A is the global batch
//          of every layout of a run (B x A x W), so every layout's epoch holds the same samples.
//          A resume with another world size continues at the same global position.
//   eval:  one pass in index order, every sample exactly once over all ranks. Every rank gets
//          ceil(N / G) batches; the last global batch's R < G samples are split as evenly as
//          possible (rank r gets R / W, plus one if r < R % W), so it can be short or empty.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace trainer::data {

// A fixed random permutation of [0, n): a pure function of (seed, epoch) (Fisher-Yates driven by
// a counter-based generator, identical on every platform).
std::vector<int64_t> epoch_permutation(int64_t n, int64_t seed, int64_t epoch);

struct SamplerPosition {
  int64_t epoch = 0;
  int64_t consumed = 0;  // global samples consumed within epoch
};

struct BatchPlan {
  int64_t epoch = 0;
  int64_t begin = 0, end = 0;  // this rank's positions [begin, end) in the epoch's order
  SamplerPosition after;       // the position once this batch is consumed
};

class Sampler {
 public:
  // `accumulation`: batches per optimizer step (train.grad_accum); an epoch is whole steps.
  Sampler(int64_t size, int64_t batch_size, int64_t rank, int64_t world_size, bool train, int64_t seed,
          int64_t accumulation = 1);
  // The batch at `pos` and advances it; nullopt when an eval pass is over.
  std::optional<BatchPlan> next(SamplerPosition& pos) const;
  // Sample index at position `p` of `epoch` (thread-safe; the permutation is cached per epoch).
  int64_t index_at(int64_t epoch, int64_t p) const;
  int64_t batches_per_epoch() const;
  int64_t global_batch() const { return batch_ * world_; }
  // Samples an epoch visits: train, whole optimizer steps of the permutation; eval, all of them.
  int64_t epoch_samples() const { return usable_; }
  int64_t size() const { return size_; }  // the dataset's samples: positions [0, size) are all valid

 private:
  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;

  int64_t size_, batch_, rank_, world_, usable_;
  bool train_;
  int64_t seed_;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<int64_t, std::shared_ptr<const std::vector<int64_t>>>> cache_;  // last 2 epochs
};

}  // namespace trainer::data
