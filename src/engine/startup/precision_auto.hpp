// train.precision auto: the compute precision a run takes, decided at start-up like model.attention
// auto (autotune.hpp) and kept for the run's whole life in autotune.json (engine/startup/startup_planner).
//   CUDA: bf16 at compute capability >= 8.0 (bf16 tensor cores), fp16 with the dynamic loss scaler on
//         7.x (fp16 tensor cores, no bf16), fp32 below.
//   CPU:  bf16 only where the CPU has native bf16 (avx512_bf16 or amx_bf16, device::cpu_bf16_flags) and
//         a probe of this model's forward + backward at the run's shapes is at least 10 % faster in bf16
//         than in fp32 (a closer call is timing noise, and fp32 is the exact one). Without those flags
//         LibTorch emulates bf16: on an AVX2-only EPYC the quickstart's bf16 step took 4.5 s against
//         308 ms in fp32 (issue 26). run.deterministic: fp32 without timing (a timed choice is not
//         reproducible).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "engine/optim/precision.hpp"
#include "models/model.hpp"

namespace trainer::engine {

// What the decision reads: the device, and on a CPU its flags and (once timed) the probe's figures.
struct PrecisionFacts {
  bool cuda = false;
  int cc_major = 0, cc_minor = 0;           // CUDA compute capability
  std::vector<std::string> cpu_bf16_flags;  // device::cpu_bf16_flags(): avx512_bf16, amx_bf16 where listed
  bool deterministic = false;               // run.deterministic
  double fp32_ms = 0, bf16_ms = 0;          // the probe's forward + backward (0 = not timed)
  int64_t probe_batch = 0;                  // the probe's micro-batch (for the reason)
};

struct PrecisionChoice {
  Precision precision = Precision::Fp32;  // never Auto
  std::string reason;                     // for the log, autotune.json and `trainer check`
  // a CPU with native bf16 and no probe figures yet: time the probe, then decide again with them
  bool needs_probe = false;
  PrecisionFacts facts;  // what it was decided on (flags, probe figures: autotune.json keeps them)
};

// The rule, a pure function of the facts (every branch is a unit test).
PrecisionChoice decide_precision(const PrecisionFacts& f);

// The fastest forward + backward milliseconds of `model` (train mode) on random inputs of micro-batch
// `batch` of `sample_shape`, in fp32 and in bf16 autocast, alternating so that drift in the machine's
// load hits both, after one warm-up of each (3 to 15 repetitions, 1 when a warm-up step took over a
// second). On a CPU: one intra-op thread, its CPU time (the host's other load left out).
// `vocab_or_classes`: the token range of a token model, the classes of an image model.
std::pair<double, double> time_precisions(models::Model& model, const std::vector<int64_t>& sample_shape,
                                          int64_t vocab_or_classes, const torch::Device& device, bool channels_last,
                                          int64_t batch);

// The facts of this machine for `device` (its capability, or the CPU's flags) and `cfg`, without timing.
PrecisionFacts precision_facts(const config::RunConfig& cfg, const torch::Device& device);

// decide_precision on this machine, timing the probe when the rule asks for it: a model of cfg.model
// built on `device` (the caller keeps the random generators: building and the inputs draw from them).
PrecisionChoice choose_precision(const config::RunConfig& cfg, const torch::Device& device,
                                 const std::vector<int64_t>& sample_shape, int64_t vocab_or_classes, int64_t batch);

}  // namespace trainer::engine
