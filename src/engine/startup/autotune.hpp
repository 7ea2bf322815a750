// Choices the trainer measures on the machine at start, like cuDNN's benchmark mode, and keeps for
// the whole run (resumes included) in <run dir>/autotune.json.
//
// model.attention auto (GPT): the explicit masked-softmax attention and scaled_dot_product_attention
// compute the same thing, but their speed depends on the device and dtype: with bf16 autocast on an
// AMX CPU the explicit path trained GPT-mini 1.6x faster than SDPA's CPU flash kernel, in fp32 SDPA
// was faster (docs/PERFORMANCE.md). auto = sdpa, except on a CPU under bf16/fp16 autocast, where
// both are timed (forward + backward at the run's shapes) and math is taken only when at least 20 %
// faster. run.deterministic runs keep sdpa without timing (a timed choice is not reproducible).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "engine/optim/precision.hpp"
#include "models/model.hpp"

namespace trainer::engine {

struct AttentionChoice {
  config::Attention attention = config::Attention::Sdpa;  // sdpa | math
  std::string reason;     // for the log
  double sdpa_ms = 0, math_ms = 0;  // measured forward + backward times (0 = not timed)
};

// Decides model.attention auto for the family's `probe` of the run's config (ModelSpec::attention_probe)
// at micro-batch `batch` (0 = unknown: 1).
AttentionChoice choose_attention(const models::AttentionProbe& probe, int64_t batch, Precision precision,
                                 const torch::Device& device, bool deterministic);

// Times forward + backward of the probe's attention, both kernels (median of `reps` after one
// warm-up), on random (batch, heads, seq, head_size) inputs in the autocast dtype; returns {sdpa_ms, math_ms}.
std::pair<double, double> time_attention(const models::AttentionProbe& probe, int64_t batch, Precision precision,
                                         const torch::Device& device, int reps = 3);

}  // namespace trainer::engine
