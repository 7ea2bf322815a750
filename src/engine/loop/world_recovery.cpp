#include "engine/loop/world_recovery.hpp"

#include <fmt/format.h>

#include "config/load.hpp"
#include <algorithm>
#include <stdexcept>

#include "engine/loop/peer_state.hpp"
#include "engine/checkpoint/stop_signal.hpp"
#include "engine/optim/train_state.hpp"

namespace trainer::engine {
namespace {

// A multi-rank run agrees on a pending stop signal at least this often (and on every log step).
constexpr int64_t kStopCheckEvery = 10;

}  // namespace

AfterFailure after_failure(const StepProgress& p, const data::LoaderState& now, const data::LoaderState& at_step_start,
                           bool record_pending) {
  // a committed step counts (every rank stepped): the loader stays where it is; an abandoned one
  // drops its partial gradients and its micro-batches are drawn again
  return {p.step_done ? now : at_step_start, record_pending || !p.recorded};
}

WorldRecovery::WorldRecovery(dist::DistContext& dist, const dist::LaunchEnv& env, const config::RunConfig& cfg,
                             std::string config_hash, WorldParts& parts, torch::Device device)
    : dist_(dist),
      cfg_(cfg),
      config_hash_(std::move(config_hash)),
      parts_(parts),
      env_(env),
      train_(cfg.train),
      samples_(cfg.train.batch_size * cfg.train.grad_accum * config::data_parallel_size(cfg, dist.world_size())),
      target_global_(cfg.train.global_batch_size > 0 ? cfg.train.global_batch_size : samples_.per_step()),
      device_(device),
      last_step_world_(dist.world_size()) {}

void WorldRecovery::begin_step(const data::LoaderState& loader) {
  record_pending_ = recorded_here_ = false;
  loader_at_step_start_ = loader;  // a regroup or a data change (data.on_change) redoes the step from here
  // with the same draws: the redone step drew the next dropout key, and every later step's was one
  // ahead of the chain of checkpoints (found from outside: a kill in a gradient bucket, dropout 0.1).
  // Only where a step can be given up: a regroup (in_process), or one process's data change
  if (dist_.recovery() || !dist_.active()) rng_at_step_start_ = rng_state_tensors(device_);
}

data::LoaderState WorldRecovery::give_up_step() {
  if (progress_.step_done) return parts_.loader_state();
  restore_rng_state(rng_at_step_start_, device_);
  return loader_at_step_start_;
}

void WorldRecovery::step_ran(int64_t steps_done, bool log_step, const torch::Tensor& grad_norm) {
  progress_ = {true, !log_step};
  idle_regroups_ = 0;
  last_log_step_ = log_step;
  last_step_world_ = dist_.world_size();
  interval_world_ = std::max(interval_world_, last_step_world_);
  last_norm_ = grad_norm;
  if (regroup_) {  // the first step at the new world size: how long recovery took
    log_first_step_after_regroup(*regroup_, steps_done);
    regroup_.reset();
  }
}

WorldRecovery::Boundary WorldRecovery::agree_stop(int64_t step, bool log_step, bool final_step, bool data_due,
                                                  const std::function<std::string()>& check_data) {
  const bool check = log_step || step % kStopCheckEvery == 0 || data_due;
  if (!dist_.active()) {  // one process: every step, for free (a regrouped one still admits replacements)
    grow_due_ = check && !final_step && dist_.propose_growth();
    // the files are looked at as several ranks do: the loader's own look covers the training files
    // at epoch boundaries only, not the validation ones
    return {stop_requested(), check ? check_data() : ""};
  }
  if (!check) return {};
  const std::string mine = check_data();  // a stat per file: cheap next to the collective
  const auto flags = dist_.any_of({stop_requested(), !final_step && dist_.propose_growth(), !mine.empty()});
  grow_due_ = flags[1];
  return {flags[0], flags[2] ? dist_.first_text(mine, "data change") : ""};
}

void WorldRecovery::grow(int64_t step) {
  grow_due_ = false;
  const auto g = dist_.grow();
  const int64_t accum = accumulation_for(target_global_, train_.batch_size, g.world, train_.grad_accum);
  const auto shared = share_run_state(dist_, cfg_, config_hash_, parts_.objects(), parts_.position(step), accum,
                                      target_global_, false);
  change_world(step, shared.grad_accum, parts_.loader_state());
  log_grown(g, dist_.member_id(), step, train_, target_global_, /*joined=*/false);
  changes_.push_back({step, g.world, g.old_world, "replacement(s) joined"});
}

bool WorldRecovery::recover(const std::string& why, int64_t step, Owed& owed) {
  const StepProgress p = progress_;
  auto plan = regroup_survivors(dist_, train_, target_global_, step, why);
  const auto next = after_failure(p, parts_.loader_state(), loader_at_step_start_, record_pending_);
  if (!p.step_done) restore_rng_state(rng_at_step_start_, device_);  // the step is redone with its draws
  change_world(step, plan.grad_accum, next.loader);
  // agreed over the new group: the record's loss all-reduce may have completed on some ranks (the
  // ring had passed them) and failed on others; a rank that redid it alone would meet its peers'
  // next collective with a different one (found by the recovery matrix: Gloo's "collective
  // mismatch" abort). The ranks that recorded already take part with the loss they recorded.
  const bool writer = takes_over_writing(plan.group);
  // a rank 0 lost after the record's all-reduce but before its line: the new writer does not find it
  const bool line_lost = writer && last_log_step_ && parts_.last_logged_step() < step;
  // and whether the committed step's milestones are owed: a rank whose record failed had not done them
  // while the writer had (it went on to the next step): one redid them alone, the other stepped, and
  // their collectives never met again (found from outside: a rank killed during a save)
  const auto agreed =
      dist_.any_of({next.redo_record || line_lost, dist_.rank() == 0 && owed.milestones, owed.start});
  record_pending_ = agreed[0];
  owed.milestones = agreed[1];
  owed.start = agreed[2];
  recorded_here_ = record_pending_ && !next.redo_record;
  std::string lost;
  for (const auto id : plan.group.lost) lost += (lost.empty() ? "" : ", ") + std::to_string(id);
  changes_.push_back({step, plan.group.world, plan.group.old_world,
                      lost.empty() ? "regrouped (no member lost)" : "lost member(s) " + lost});
  // A second regroup that lost no member, with no step run since the first: the survivors' collectives
  // disagree (one redoing what the others finished) and every try times out the same way. They went on
  // regrouping every dist.timeout_s for good, deaf to a stop signal (found from outside: a rank killed
  // during a save). Every member sees the same membership, so all stop here together.
  idle_regroups_ = lost.empty() ? idle_regroups_ + 1 : 0;
  if (idle_regroups_ >= 2)
    throw std::runtime_error(fmt::format(
        "in-process recovery: the survivors regrouped {} times at step {} without losing a member and without "
        "completing a step (their collectives disagree: {}); the run stops here, its last checkpoint stays, and a "
        "rerun (or trainer launch --max-restarts) resumes from it",
        idle_regroups_, step, why));
  regroup_ = std::move(plan);
  return writer;
}

std::optional<WorldRecovery::Joined> WorldRecovery::join() {
  const auto joined = dist_.join([] { return stop_requested(); });
  if (!joined) {
    log_not_joined();
    return std::nullopt;
  }
  const auto shared = share_run_state(dist_, cfg_, config_hash_, parts_.objects(), {}, 0, 0, /*restore=*/true);
  if (shared.target_global > 0) target_global_ = shared.target_global;  // the group's aim, not this process's start
  samples_.start_at(shared.pos.step);
  change_world(shared.pos.step, shared.grad_accum, shared.pos.loader);
  log_grown(*joined, dist_.member_id(), shared.pos.step, train_, target_global_, /*joined=*/true);
  joined_ = true;
  return Joined{shared.pos.step, shared.pos.time_s};
}

// The samples so far are counted at the world that ran them; then the trainer rebuilds for the new
// group (env(), grad_accum()).
void WorldRecovery::change_world(int64_t step, int64_t grad_accum, const data::LoaderState& pos) {
  // no step without a micro-batch (a step of none would sync gradients that do not exist)
  if (grad_accum < 1)
    throw std::runtime_error("in-process recovery: accumulation " + std::to_string(grad_accum) + " at step " +
                             std::to_string(step) + " is not a step; the run cannot go on in process");
  env_.rank = dist_.rank();
  env_.world_size = dist_.world_size();
  train_.grad_accum = grad_accum;
  samples_.change(step, train_.batch_size * grad_accum * dist_.world_size());
  parts_.rebuild_world(pos);
}

}  // namespace trainer::engine
