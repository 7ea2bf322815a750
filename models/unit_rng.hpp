// Dropout streams by unit. A pipeline stage runs some of the model's units for microbatch m; one
// process runs all of them. With torch's default stream, a unit's dropout mask depends on every draw
// made before it in this process (the earlier units, the earlier microbatches), so a stage would draw
// other masks than one process does, and the pp ranks' default streams would drift apart (a
// checkpoint stores rank 0's). Instead, in a training step each unit's forward draws from a stream
// of its own, seeded by (the step's key, the microbatch, the unit):
//   - the masks of unit u in microbatch m are the same in one process (grad_accum micro-batches) and
//     on the pp rank whose stage holds u (the executor's microbatch m), whatever the stages;
//   - the step's key is one draw of the CPU default generator per step on every rank, so the default
//     stream stays the same on all ranks and a resumed checkpoint (which stores it) draws the same keys;
//   - activation checkpointing saves the unit's stream at its entry and restores it for the recompute.
// The scope seeds the CPU default generator and, on CUDA, the device's, and restores both after:
// dropout draws from the device's, the tensor-parallel region streams draw from the CPU's.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace trainer::models {

// The seed of unit `unit`'s stream in microbatch `micro` of the step with key `step_key` (splitmix64:
// nearby keys, microbatches and units give unrelated seeds).
uint64_t unit_stream_seed(uint64_t step_key, int64_t micro, int64_t unit);

// One draw of the CPU default generator: a step's key (every rank draws once per step).
uint64_t draw_step_key();

// For its scope the CPU default generator, and `device`'s when it is a CUDA device, run from `seed`;
// both return to their state at entry after (an exception included).
class UnitRngScope {
 public:
  UnitRngScope(const torch::Device& device, uint64_t seed);
  ~UnitRngScope();
  UnitRngScope(const UnitRngScope&) = delete;
  UnitRngScope& operator=(const UnitRngScope&) = delete;

 private:
  std::vector<at::Generator> gens_;
  std::vector<torch::Tensor> saved_;
};

// What a model carries: the step's key (nullopt: no unit streams, torch's default stream as is) and the
// microbatch the next forward runs.
struct UnitStreams {
  std::optional<uint64_t> step_key;
  int64_t micro = 0;
};

}  // namespace trainer::models
