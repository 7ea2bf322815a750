#include "engine/loop/world_change.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <stdexcept>

namespace trainer::engine {

int64_t accumulation_for(int64_t global_batch, int64_t batch, int64_t world, int64_t current) {
  const int64_t per_accum = batch * world;
  if (global_batch > 0 && per_accum > 0 && global_batch % per_accum == 0) return global_batch / per_accum;
  return current;
}

int64_t steps_at_new_world_size(const config::TrainConfig& t, const RunPosition& pos, int64_t world,
                                int64_t batches_per_epoch, int64_t start_step, int64_t total_steps,
                                const std::string& ranks) {
  const int64_t samples_per_step = t.batch_size * t.grad_accum * world;
  spdlog::warn("resuming a checkpoint of {} {} on {}: the data continue at global sample {} of epoch {}, "
               "and every rank's random generators are re-derived from the saved state",
               pos.world_size, ranks == "ranks" ? "rank(s)" : ranks, world, pos.loader.samples_consumed,
               pos.loader.epoch);
  // the checkpoint's own samples per step (an older one: the configured global batch, if any)
  const int64_t before = pos.global_batch > 0 ? pos.global_batch : t.global_batch_size;
  if (before == samples_per_step)
    spdlog::info("train.global_batch_size {} kept: {} per micro-batch x {} accumulation x {} {}", samples_per_step,
                 t.batch_size, t.grad_accum, world, ranks);
  else
    spdlog::warn("the global batch changes from {} to {} samples per step ({} {}); set train.global_batch_size "
                 "to keep it across world sizes",
                 before > 0 ? std::to_string(before) : std::string("?"), samples_per_step, world, ranks);
  if (t.max_steps > 0) return total_steps;
  // sized in epochs: the remaining steps are recounted at the new samples per step (the caller lays
  // the schedule out over the new total)
  const int64_t total = epochs_total_from(t, pos, world, batches_per_epoch, start_step);
  if (total != total_steps) spdlog::info("the run is sized in epochs: {} steps in all now (was {})", total, total_steps);
  return total;
}

int64_t epochs_total_from(const config::TrainConfig& t, const RunPosition& pos, int64_t world,
                          int64_t batches_per_epoch, int64_t start_step) {
  const int64_t samples_per_step = t.batch_size * t.grad_accum * world;
  const int64_t per_epoch = batches_per_epoch * t.batch_size * world;
  const double target = t.epochs * static_cast<double>(per_epoch);
  const double done = static_cast<double>(pos.loader.epoch * per_epoch + pos.loader.samples_consumed);
  const int64_t left = std::max<int64_t>(
      0, static_cast<int64_t>(std::ceil((target - done) / static_cast<double>(samples_per_step) - 1e-9)));
  return start_step + left;
}

namespace {
std::string ids_text(const std::vector<int64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out;
}
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

RegroupPlan regroup_survivors(dist::DistContext& dist, const config::TrainConfig& t, int64_t global_batch,
                              int64_t committed_steps, const std::string& why) {
  RegroupPlan plan;
  plan.failure_seen = std::chrono::steady_clock::now();
  spdlog::warn("in-process recovery: member {} (rank {} of {}, pid {}) saw a failure after {} committed steps: {}",
               dist.member_id(), dist.rank(), dist.world_size(), ::getpid(), committed_steps, why);
  try {
    plan.group = dist.regroup(committed_steps, why);
  } catch (const dist::DistError& e) {
    throw std::runtime_error(std::string("in-process recovery failed: ") + e.what());
  }
  const auto& g = plan.group;
  const int64_t global = global_batch;
  plan.grad_accum = accumulation_for(global, t.batch_size, g.world, t.grad_accum);
  const bool kept = t.batch_size * plan.grad_accum * g.world == global;
  spdlog::warn("in-process recovery: {}; member {} (pid {}) continues as rank {} of {} (generation "
               "{}) at step {}, {} x {} accumulation x {} ranks = {} samples per step{}",
               g.lost.empty() ? "no member lost" : "lost member(s) " + ids_text(g.lost), dist.member_id(), ::getpid(), g.rank, g.world, g.generation, committed_steps + 1,
               t.batch_size, plan.grad_accum, g.world, t.batch_size * plan.grad_accum * g.world,
               kept ? " (global batch kept)"
                    : fmt::format(" (not {}: it does not divide by {} x {})", global, t.batch_size, g.world));
  return plan;
}

void log_grown(const dist::DistContext::Regrouped& g, int64_t member, int64_t committed_steps,
               const config::TrainConfig& t, int64_t global_batch, bool joined) {
  const std::string how = joined ? fmt::format("member {} (pid {}) joined the running group, with rank 0's state "
                                               "(not from a checkpoint),", member, ::getpid())
                                 : fmt::format("the group grew from {} to {} ranks; member {} (pid {}) continues", g.old_world,
                                               g.world, member, ::getpid());
  const int64_t samples = t.batch_size * t.grad_accum * g.world;
  spdlog::warn("in-process recovery: {} as rank {} of {} (generation {}) after {} committed steps, {} x {} accumulation "
               "x {} ranks = {} samples per step{}",
               how, g.rank, g.world, g.generation, committed_steps, t.batch_size, t.grad_accum, g.world, samples,
               samples == global_batch ? " (global batch kept)"
                                       : fmt::format(" (not {}: it does not divide by {} x {})", global_batch,
                                                     t.batch_size, g.world));
}

void log_not_joined() {
  spdlog::info("in-process recovery: the run ended (finished or stopped) before this replacement could join it");
}

void log_first_step_after_regroup(const RegroupPlan& plan, int64_t step) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - plan.failure_seen).count();
  spdlog::info("in-process recovery: step {} done at world size {}, {:.3f} s after the failure was seen (unix time "
               "{:.3f})",
               step, plan.group.world, s, unix_now());
}

}  // namespace trainer::engine
