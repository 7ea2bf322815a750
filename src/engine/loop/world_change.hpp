// What changes when a run's world size changes: a resume on another number of ranks, and
// dist.recovery in_process, the engine's half (the store protocol is dist/dist_regroup.cpp): after a
// collective failed because a peer died or hung, the survivors regroup and the run goes on from
// memory at the smaller world size. What the trainer then rebuilds: the data-parallel strategy, the
// loader (re-sharded at the same global position), the evaluator, the step runner; the model, the
// optimizer state and the generators stay as they are (they are the same on every rank).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "dist/dist_context.hpp"
#include "engine/checkpoint/checkpointing.hpp"

namespace trainer::engine {

// The micro-batches per step that keep `global_batch` samples per step with `world` ranks of
// `batch`; `current` when it does not divide (the global batch then changes).
int64_t accumulation_for(int64_t global_batch, int64_t batch, int64_t world, int64_t current);

// A checkpoint saved by another number of ranks (`pos.world_size`) resumed on `world`: parameters are
// whole in every checkpoint and optimizer shards are assembled into whole tensors on load
// (parallel/sharded_checkpoint.hpp), so both load at any world size; the data position is global, so the
// loader continues at the same sample; every rank takes the saved generator state. Logs what changes
// and returns the run's total steps: recounted when the run is sized in epochs (it ends after the same
// number of samples), else `total_steps`.
// An epochs-sized run's total steps from `pos` on: `start_step` plus the steps that the samples left of
// train.epochs take at `world` ranks (it ends after the same number of samples at any world size).
int64_t epochs_total_from(const config::TrainConfig& t, const RunPosition& pos, int64_t world,
                          int64_t batches_per_epoch, int64_t start_step);
// `ranks`: what `world` counts in the log ("ranks", or "data-parallel ranks" under tensor or pipeline parallel)
int64_t steps_at_new_world_size(const config::TrainConfig& t, const RunPosition& pos, int64_t world,
                                int64_t batches_per_epoch, int64_t start_step, int64_t total_steps,
                                const std::string& ranks = "ranks");

struct RegroupPlan {
  dist::DistContext::Regrouped group;
  int64_t grad_accum = 1;
  std::chrono::steady_clock::time_point failure_seen;
};

// Regroups the survivors (every rank's log says who was lost and what it continues as) and works out
// the accumulation at the new world size. Throws std::runtime_error when the run cannot go on in
// process (this rank was left out, the survivors disagree, a second failure during the regroup).
// `global_batch`: the samples per step every world size aims at (train.global_batch_size, else the
// start's), not the current world's.
RegroupPlan regroup_survivors(dist::DistContext& dist, const config::TrainConfig& t, int64_t global_batch,
                              int64_t committed_steps, const std::string& why);

// The lines a grown group logs: each member its new rank; `joined`: this process is the replacement.
void log_grown(const dist::DistContext::Regrouped& g, int64_t member, int64_t committed_steps,
               const config::TrainConfig& t, int64_t global_batch, bool joined);

// A replacement that did not join: the run ended (finished or stopped) first.
void log_not_joined();

// The line logged when the first step at the new world size is done: how long recovery took.
void log_first_step_after_regroup(const RegroupPlan& plan, int64_t step);

}  // namespace trainer::engine
