// Dropout inside a tensor-parallel region must draw another mask on each tp rank, and dropout
// outside it the same mask on every rank (Megatron's model-parallel RNG tracker):
//   - the attention probabilities of a rank's own heads: each head's mask is its own at T = 1 too,
//     so tp ranks drawing the same stream would correlate the heads of different ranks;
//   - with sequence parallel, the residual and embedding dropout of a rank's chunk of the sequence:
//     the chunks are other positions, so each needs its own mask, not one pattern repeated;
//   - replicated activations (the residual stream without sequence parallel) keep the default
//     stream, the same on every tp rank, as the replicas must stay equal.
// RegionRng, for its scope, seeds the default generator of `device` from one draw of the CPU default
// generator mixed with the tp rank, and restores that generator after. Every tp rank draws once, so
// the default stream stays the same on all of them; the region's stream is a function of the default
// state at its entry, so activation checkpointing's recompute (which restores that state) and a
// resumed checkpoint (which stores it) draw the same masks again: no state of its own to carry.
// Nothing happens when comm.size() == 1 or `active` is false (eval, dropout 0): T = 1 is unchanged.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "tensor_parallel/communicator.hpp"

namespace trainer::tensor_parallel {

class RegionRng {
 public:
  RegionRng(const torch::Device& device, const Communicator& comm, bool active);
  ~RegionRng();  // the device's default generator back to its state at entry (after the draw)
  RegionRng(const RegionRng&) = delete;
  RegionRng& operator=(const RegionRng&) = delete;

  // The seed of this rank's region stream from the CPU default generator's draw (exposed for tests).
  static uint64_t region_seed(uint64_t draw, int64_t tp_rank);

 private:
  std::optional<at::Generator> gen_;  // set while a region stream replaces the default one
  torch::Tensor saved_;               // the default generator's state to restore
};

// torch::dropout of `x` under a RegionRng on x's device: another mask on each tp rank.
torch::Tensor region_dropout(const torch::Tensor& x, double p, bool training, const Communicator& comm);

}  // namespace trainer::tensor_parallel
