#include "engine/checkpoint/checkpoint_manager.hpp"

#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "config/exit_codes.hpp"
#include "engine/parallel/sharded_checkpoint.hpp"
#include "engine/checkpoint/folder_owner.hpp"
#include "engine/checkpoint/stop_signal.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_parts.hpp"

namespace trainer::engine {
namespace {

double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// SLURM's id for `scontrol requeue`: ARRAYJOB_TASK for an array task, else the job id.
std::string slurm_job_to_requeue() {
  const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
  if (array_job && *array_job && task && *task) return std::string(array_job) + "_" + task;
  const char* job = std::getenv("SLURM_JOB_ID");
  return job ? job : "";
}

// Runs argv (found on PATH) and returns its exit status, or -1 when it could not be started.
int run_program(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const char* kind_text(SaveKind k) {
  switch (k) {
    case SaveKind::Final: return "the final checkpoint";
    case SaveKind::Signal: return "the checkpoint the stop signal asked for";
    case SaveKind::DataChanged: return "the checkpoint before stopping for changed data";
    default: return "the checkpoint";
  }
}

}  // namespace

CheckpointManager::CheckpointManager(const config::RunConfig& cfg, const dist::LaunchEnv& env,
                                     dist::DistContext* dist, const std::filesystem::path& run_root,
                                     RunObjects objs, std::function<RunPosition(int64_t)> position)
    : cfg_(cfg), env_(env), dist_(dist), dir_(checkpoint_dir(cfg, run_root)),
      run_root_(std::filesystem::weakly_canonical(run_root).string()), objs_(objs),
      position_(std::move(position)) {}

void CheckpointManager::become_writer() {
  if (env_.rank == 0 && !store_)
    store_ = std::make_unique<io::CheckpointStore>(
        dir_, io::CheckpointPolicy{cfg_.checkpoint.keep_last, cfg_.checkpoint.keep_every});
}

std::optional<Resumed> CheckpointManager::resume(const ResumeOptions& how) {
  std::string refused;  // rank 0 looks (another node may mount the run directory elsewhere); all stop
  if (env_.rank == 0) try {
      // (the run's own checkpoints/ is asked only by --resume auto: --resume PATH names the start)
      if (!cfg_.checkpoint.dir.empty() || how.mode == ResumeMode::Auto)
        refuse_other_runs_checkpoints(dir_, run_root_, /*explicit_dir=*/!cfg_.checkpoint.dir.empty());
    } catch (const std::runtime_error& e) {
      refused = e.what();
    }
  if (dist_ && dist_->active() ? dist_->any(!refused.empty()) : !refused.empty())
    throw std::runtime_error(refused.empty() ? "rank 0 refused checkpoint.dir " + dir_.string() + " (its log says why)"
                                             : refused);
  if (env_.rank == 0)
    store_ = std::make_unique<io::CheckpointStore>(
        dir_, io::CheckpointPolicy{cfg_.checkpoint.keep_last, cfg_.checkpoint.keep_every});
  if (dist_) {
    dist_->kill_point("start", ++starts_);  // TRAINER_INJECT_KILL (tests): a rank lost at start-up
    dist_->barrier();  // the store cleaned stale temporary folders before anyone scans
  }
  std::optional<Resumed> r;
  if (how.mode == ResumeMode::Auto) {
    r = resume_newest();
  } else if (how.mode == ResumeMode::Path) {
    const auto from = io::resolve_checkpoint_path(how.path);
    r = Resumed{from, restore_checkpoint(io::load_checkpoint(from), from, cfg_, objs_)};
  }
  if (dist_ && dist_->active()) {
    // every rank read the shared folder on its own: they must stand at the same step
    const double mine = r ? static_cast<double>(r->pos.step) : -1.0;
    const double mean = dist_->all_reduce_mean(mine);
    if (dist_->any(std::abs(mean - mine) > 0.5))
      throw std::runtime_error("the ranks did not find the same checkpoint to resume from (rank " +
                               std::to_string(env_.rank) + ": " + (r ? r->from.string() : std::string("none")) +
                               "); every rank's log lists what it rejected and why");
  }
  if (r && store_) store_->mark_verified(r->pos.step);
  if (r) put_back_interval(r->pos, /*with_skips=*/true);
  // (--resume PATH of another run's folder: this run's folder does not hold the start yet)
  namespace fs = std::filesystem;
  start_elsewhere_ = r && fs::weakly_canonical(r->from).parent_path() != fs::weakly_canonical(dir_);
  return r;
}

std::optional<Resumed> CheckpointManager::resume_newest() {
  const auto folders = io::step_folders_newest_first(dir_);
  std::vector<std::string> rejected;
  for (const auto& c : folders) {
    try {
      auto pos = restore_checkpoint(io::load_checkpoint(c.path), c.path, cfg_, objs_);
      for (const auto& why : rejected) spdlog::warn("skipped a newer checkpoint that cannot be resumed: {}", why);
      return Resumed{c.path, pos};
    } catch (const std::exception& e) {  // does not verify, lacks a part, another model, ...
      rejected.push_back(e.what());
    }
  }
  if (folders.empty()) return std::nullopt;
  std::string msg = "--resume auto: " + dir_.string() + " holds " + std::to_string(folders.size()) +
                    " checkpoint folder(s), but none can be resumed from:";
  for (const auto& why : rejected) msg += "\n  " + why;
  msg += "\nNothing was deleted. Repair or move them, resume one explicitly with --resume PATH, or start over "
         "with --resume never --force (folders that do not verify are never deleted)";
  throw std::runtime_error(msg);
}

std::string CheckpointManager::nonfinite_parameter() const {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> flags;
  for (const auto& p : objs_.model.parameters()) flags.push_back(p.isfinite().all());
  if (flags.empty() || torch::stack(flags).all().item<bool>()) return "";
  for (const auto& item : objs_.model.named_parameters())
    if (!item.value().isfinite().all().template item<bool>()) return item.key();
  return "?";
}

std::string CheckpointManager::stage_shards(int64_t step, std::map<std::string, std::filesystem::path>& staged) {
  std::string what;
  const auto& part = checkpoint_part(objs_);
  const auto group = part.shard_group();
  const auto mine = io::staged_shard_path(dir_, step, group);
  try {
    io::save_safetensors(mine.string(), part.shard_tensors(objs_.optimizer, objs_.model),
                         {{"checkpoint_group", group}, {"step", std::to_string(step)}});
  } catch (const std::exception& e) {
    what = "rank " + std::to_string(env_.rank) + " could not write its shard " + mine.string() + ": " + e.what();
  }
  // the writers' pids name the staged files (a store removes those of dead writers)
  auto pid = torch::tensor({static_cast<int64_t>(::getpid()), what.empty() ? int64_t{0} : int64_t{1}}, torch::kInt64);
  auto all = dist_->all_gather(pid.to(dist_->device()), "shard staging").cpu();
  for (int64_t r = 0; r < env_.world_size; ++r) {
    if (all[r][1].item<int64_t>() != 0 && what.empty())
      what = "rank " + std::to_string(r) + " could not write its optimizer shard (its log says why)";
    const auto name = shard_group_name(r, env_.world_size);
    staged[name] = io::staged_shard_path(dir_, step, name, all[r][0].item<int64_t>());
  }
  return what;
}

std::string CheckpointManager::stage_tp_parts(int64_t step, const TpParts& parts,
                                              std::map<std::string, std::filesystem::path>& staged) {
  std::string what;
  auto write = [&](const std::string& name, const io::NamedTensors& tensors, std::map<std::string, std::string> meta) {
    const auto file = io::staged_shard_path(dir_, step, name);
    meta["checkpoint_group"] = name;
    meta["step"] = std::to_string(step);
    try {
      io::save_safetensors(file.string(), tensors, meta);
    } catch (const std::exception& e) {
      what = "rank " + std::to_string(env_.rank) + " could not write its part " + file.string() + ": " + e.what();
    }
  };
  const bool stages = parts.writes && parts.part > 0;  // part 0 is rank 0's: written into the folder itself
  if (stages)
    for (const auto& [group, part] : parts.groups) {
      write(io::part_group_name(group, parts.part, parts.parts), part.tensors,
            {{io::kRangesKey, io::encode_ranges(part.ranges)}});
      if (!what.empty()) break;
    }
  if (parts.shard && what.empty()) write(parts.shard->group, parts.shard->tensors, parts.shard->metadata);
  // the writers' pids name the staged files (a store removes those of dead writers); -1: writes no
  // model part; the part shard's dp rank (-1: none)
  const int64_t shard_rank = parts.shard ? checkpoint_part(objs_).shard_of().first : -1;
  auto mine = torch::tensor({static_cast<int64_t>(::getpid()), what.empty() ? int64_t{0} : int64_t{1},
                             stages ? parts.part : int64_t{-1}, parts.part, shard_rank},
                            torch::kInt64);
  auto all = dist_->all_gather(mine.to(dist_->device()), "tensor-parallel part staging").cpu();
  for (int64_t r = 0; r < env_.world_size; ++r) {
    if (all[r][1].item<int64_t>() != 0 && what.empty())
      what = "rank " + std::to_string(r) + " could not write its tensor-parallel part (its log says why)";
    const int64_t pid = all[r][0].item<int64_t>(), k = all[r][2].item<int64_t>(), shard = all[r][4].item<int64_t>();
    if (k > 0)
      for (const auto& [group, part] : parts.groups) {
        const auto name = io::part_group_name(group, k, parts.parts);
        staged[name] = io::staged_shard_path(dir_, step, name, pid);
      }
    if (shard >= 0) {
      const auto name = part_shard_group_name(all[r][3].item<int64_t>(), parts.parts, shard, parts.shard_world);
      staged[name] = io::staged_shard_path(dir_, step, name, pid);
    }
  }
  return what;
}

std::optional<LossInterval> CheckpointManager::gather_interval(int64_t step) {
  if (!interval_.get) return std::nullopt;
  const auto mine = interval_.get();
  const bool any = mine.loss_count > 0 && mine.loss_sum.defined();
  LossInterval li;
  li.steps = step % cfg_.train.log_every;  // since the last log step
  li.dtype = any ? mine.loss_sum.scalar_type() : torch::kFloat;
  li.skipped_steps = mine.skipped_steps;
  // a float sum is exact in a double: the pair travels as doubles
  auto t = torch::tensor({any ? mine.loss_sum.item<double>() : 0.0, static_cast<double>(mine.loss_count),
                          static_cast<double>(mine.per_step)},
                         torch::kFloat64);
  if (dist_ && dist_->active()) t = dist_->all_gather(t.to(dist_->device()), "log interval").cpu();
  else t = t.unsqueeze(0);
  for (int64_t r = 0; r < t.size(0); ++r) {
    li.loss_sums.push_back(t[r][0].item<double>());
    li.loss_counts.push_back(static_cast<int64_t>(t[r][1].item<double>()));
    li.per_step.push_back(static_cast<int64_t>(t[r][2].item<double>()));
  }
  return li;
}

void CheckpointManager::put_back_interval(const RunPosition& pos, bool with_skips) {
  if (!interval_.set || !pos.interval) return;
  const auto& li = *pos.interval;
  const auto ranks = static_cast<int64_t>(li.loss_sums.size());
  StepRunner::Interval i = interval_.get();
  i.carried = {};
  i.loss_count = 0;
  i.loss_sum = torch::Tensor();
  i.per_step = 0;
  if (ranks == env_.world_size) {
    // this rank's own: the records are the uninterrupted run's, bit for bit, when this run's steps hold
    // as many micro-batches (else the step runner takes the saved ones at their mean: per_step)
    i.per_step = li.per_step[static_cast<size_t>(env_.rank)];
    i.loss_count = li.loss_counts[static_cast<size_t>(env_.rank)];
    if (i.loss_count > 0)
      i.loss_sum = torch::full({}, li.loss_sums[static_cast<size_t>(env_.rank)],
                               torch::TensorOptions().dtype(li.dtype).device(objs_.device));
  } else {
    // another number of ranks, maybe another accumulation: the saved steps' mean micro-batch loss, as
    // that many steps of this world's micro-batches (the record is the mean over ranks of sum / count)
    double mean = 0;
    int64_t with = 0;
    for (int64_t r = 0; r < ranks; ++r)
      if (li.loss_counts[r] > 0) mean += li.loss_sums[r] / static_cast<double>(li.loss_counts[r]), ++with;
    if (with > 0 && li.steps > 0) i.carried = {mean / static_cast<double>(with), li.steps};
  }
  if (with_skips) i.skipped_steps = li.skipped_steps;
  interval_.set(i);
}

bool CheckpointManager::save(int64_t step, SaveKind kind) {
  FullParams whole(objs_.parallel, /*write=*/false);  // dist.sharding full: rank 0 writes the whole model
  const auto interval = gather_interval(step);  // every rank: before anything can fail on one rank alone
  // tensor parallel: each tp rank of dp rank 0 writes its slices (every rank takes part: the dp gather)
  const auto parts = dist_ && dist_->active() ? tp_parts(objs_) : std::nullopt;
  int failure = 0;  // 1: the save failed, 2: non-finite weights
  std::string what;
  std::map<std::string, std::filesystem::path> staged;  // sharded: every rank's shard file; tp: every part
  const bool sharded = !parts && checkpoint_part(objs_).sharded_state() && dist_ && dist_->active();
  if (sharded) what = stage_shards(step, staged);
  if (parts) what = stage_tp_parts(step, *parts, staged);
  if (!what.empty()) {
    failure = 1;
    if (env_.rank != 0) {  // rank 0 reports the save's failure; the outcome is agreed below
      // this rank's own write failed: its log names the file and why (rank 0's says to look here)
      if (what.rfind("rank " + std::to_string(env_.rank) + " ", 0) == 0) spdlog::error("{}", what);
      what.clear();
    }
  } else if (store_) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto bad = nonfinite_parameter(); !bad.empty()) {
      failure = 2;
      what = "refusing to save a checkpoint at step " + std::to_string(step) + ": parameter '" + bad +
             "' holds inf/NaN values (the previous checkpoints are kept)";
    } else {
      try {
        auto pos = position_(step);
        pos.interval = interval;
        auto content = capture_checkpoint(cfg_, objs_, pos, parts ? &*parts : nullptr);
        content.state["run_dir"] = run_root_;  // whose checkpoints they are (folder_owner.hpp)
        // a stop's or a data change's: an uninterrupted run has no such checkpoint (roll_back passes it)
        if (kind == SaveKind::Signal || kind == SaveKind::DataChanged) content.state[io::kStateUnscheduled] = true;
        content.staged = staged;
        if (dist_) content.before_manifest = [this, step] { dist_->kill_point("save", step); };
        auto path = store_->save(step, content);
        spdlog::info("checkpoint {} ({:.0f} ms)", path.string(), elapsed_ms(t0));
      } catch (const std::exception& e) {  // I/O (named by the store), encoding, ...
        failure = 1;
        what = e.what();
      }
    }
  }
  if (dist_ && dist_->active()) {
    // rank 0's outcome, agreed on by every rank: 0, 1 or 2
    const double mine = env_.rank == 0 ? static_cast<double>(failure) : 0.0;  // a staging failure is known to all
    const double agreed = dist_->all_reduce_mean(mine) * static_cast<double>(env_.world_size);
    failure = static_cast<int>(std::lround(agreed));
    if (failure != 0 && what.empty())
      what = "rank 0 could not save the checkpoint at step " + std::to_string(step) + " (its log says why)";
  }
  if (sharded && failure != 0) {  // a staged shard not moved into a checkpoint is garbage
    std::error_code ec;
    std::filesystem::remove(io::staged_shard_path(dir_, step, checkpoint_part(objs_).shard_group()), ec);
  }
  if (parts && failure != 0) {  // so is a staged part, and a part shard
    std::error_code ec;
    if (parts->part > 0)
      for (const auto& [group, part] : parts->groups)
        std::filesystem::remove(io::staged_shard_path(dir_, step, io::part_group_name(group, parts->part, parts->parts)), ec);
    if (parts->shard) std::filesystem::remove(io::staged_shard_path(dir_, step, parts->shard->group), ec);
  }
  if (failure == 2) throw std::runtime_error(what);
  if (failure == 0) {
    failed_in_row_ = 0;
    return true;
  }
  ++failed_in_row_;
  last_failed_step_ = step;
  const std::string head = std::string(kind_text(kind)) + " at step " + std::to_string(step) + " could not be saved";
  if (kind != SaveKind::Periodic)
    throw CheckpointFailed(head + ": " + what + ". The work since the last saved checkpoint is not saved; fix the "
                           "cause and run the same command again to resume from the last good checkpoint");
  if (cfg_.checkpoint.on_error == config::OnError::Abort) throw CheckpointFailed(head + " (checkpoint.on_error: abort): " + what);
  if (failed_in_row_ > cfg_.checkpoint.max_failures)
    throw CheckpointFailed(head + ": " + what + "; that is " + std::to_string(failed_in_row_) +
                           " failed saves in a row (checkpoint.max_failures " +
                           std::to_string(cfg_.checkpoint.max_failures) + "): stopping instead of training on unsaved");
  spdlog::warn("{}; training continues ({} failed in a row, checkpoint.max_failures {}, checkpoint.on_error: warn): {}",
               head, failed_in_row_, cfg_.checkpoint.max_failures, what);
  return false;
}

void CheckpointManager::keep_best(int64_t step, bool saved_at_step) {
  if (!cfg_.checkpoint.save_best || objs_.tracker.best_step() != step) return;
  // the periodic save of this very step failed: one failure, not a second one counted against
  // checkpoint.max_failures by saving it again at once
  if (!saved_at_step && (last_failed_step_ == step || !save(step, SaveKind::Periodic))) {
    if (store_)  // said once, by the writer: a silent failure left `best` at an older, worse step
      spdlog::warn("the best {} so far ({:.4f}) is step {}'s, but its checkpoint could not be saved: `best` still "
                   "points at the previous best checkpoint, not at this evaluation",
                   objs_.tracker.metric(), objs_.tracker.best().value_or(0), step);
    return;
  }
  if (!store_) return;
  try {
    store_->mark_best(step);
    store_->prune(step);  // the previous best is now only an ordinary older checkpoint
    spdlog::info("best {} so far ({:.4f}): checkpoint step {} is kept as `best`", objs_.tracker.metric(),
                 objs_.tracker.best().value_or(0), step);
  } catch (const io::CheckpointError& e) {
    spdlog::warn("could not mark the checkpoint of step {} as best: {}", step, e.what());
  }
}

void CheckpointManager::requeue_if_asked() const {
  if (!cfg_.checkpoint.requeue || env_.rank != 0) return;
  const std::string job = slurm_job_to_requeue();
  if (job.empty()) {
    spdlog::warn("checkpoint.requeue is set but SLURM_JOB_ID is not: nothing to requeue");
    return;
  }
  const int rc = run_program({"scontrol", "requeue", job});
  if (rc == 0) spdlog::info("scontrol requeue {}: the job is queued again and will resume from this checkpoint", job);
  else spdlog::error("scontrol requeue {} failed ({}); requeue the job by hand: the checkpoint is saved", job,
                     rc < 0 ? std::string("could not run scontrol") : "exit code " + std::to_string(rc));
}

int64_t CheckpointManager::roll_back(int64_t step) {
  // the newest checkpoint of this run's past that verifies: later ones (left by an earlier run that
  // got further, see --force) are not this run's past. A stop signal's checkpoint is passed over
  // for an older scheduled one: the uninterrupted run rolls back there, and a resumed run must too
  // (found from outside: a stop at step 11 made a later rollback land on 11, not 10)
  std::optional<io::CheckpointInfo> target, unscheduled;
  for (const auto& c : io::step_folders_newest_first(dir_)) {
    if (c.step >= step) continue;
    try {
      io::verify_checkpoint(c.path);
      if (saved_unscheduled(c.path)) {
        if (!unscheduled) unscheduled = c;
        continue;
      }
      target = c;
      break;
    } catch (const io::CheckpointError& e) {
      spdlog::warn("rollback: skipping a checkpoint that does not verify: {}", e.what());
    }
  }
  if (!target) target = unscheduled;  // nothing older: better than giving up
  if (!target)
    throw std::runtime_error("non-finite gradients at step " + std::to_string(step) +
                             " and no checkpoint to roll back to in " + dir_.string() +
                             " (train.nonfinite: rollback needs checkpoint.every_steps)");
  auto pos = restore_checkpoint(io::load_checkpoint(target->path), target->path, cfg_, objs_);
  put_back_interval(pos, /*with_skips=*/false);  // the steps skipped since stay counted
  if (pos.step == rollback_target_) {
    if (++rollbacks_to_target_ > cfg_.train.max_nonfinite)
      throw std::runtime_error(fmt::format("non-finite gradients again after {} rollbacks to step {} "
                                           "(train.max_nonfinite {}): giving up",
                                           rollbacks_to_target_ - 1, pos.step, cfg_.train.max_nonfinite));
  } else {
    rollback_target_ = pos.step;
    rollbacks_to_target_ = 1;
  }
  spdlog::warn("non-finite gradients at step {}: rolled back to the checkpoint of step {} ({}); the data continue "
               "where they were (rollback {} of at most {} to this checkpoint)",
               step, pos.step, target->path.string(), rollbacks_to_target_, cfg_.train.max_nonfinite);
  return pos.step;
}

int CheckpointManager::stop_for_signal(int64_t step, int64_t start_step) {
  const std::string sig = stop_signal_name().empty() ? "a stop signal" : stop_signal_name();
  if (step == start_step && !start_elsewhere_) {
    spdlog::warn("{} received during start-up, before step {}: nothing new to save; exiting with code {} "
                 "(requeue me)", sig, step + 1, kExitSavedAfterSignal);
  } else if (step == start_step) {
    spdlog::warn("{} received during start-up, before step {}: saving the state it resumed from another folder "
                 "into this run's, at step {}, and exiting with code {} (requeue me)",
                 sig, step + 1, step, kExitSavedAfterSignal);
    save(step, SaveKind::Signal);
  } else {
    spdlog::warn("{} received: saving a checkpoint at step {} and exiting with code {} (requeue me)", sig, step,
                 kExitSavedAfterSignal);
    save(step, SaveKind::Signal);
  }
  if (dist_) dist_->barrier();
  requeue_if_asked();
  return kExitSavedAfterSignal;
}

int CheckpointManager::stop_for_data_change(int64_t step, int64_t start_step, const std::string& what) {
  if (step == start_step) {
    spdlog::error("{}; nothing new to save before step {}; exiting with code {}", what, step + 1, kExitDataChanged);
  } else {
    save(step, SaveKind::DataChanged);  // every rank: they agreed on the change at this step boundary
    spdlog::error("{}; saved a checkpoint at step {}; exiting with code {} (run the same command again to resume "
                  "on the data as they are now)",
                  what, step, kExitDataChanged);
  }
  if (dist_) dist_->barrier();
  return kExitDataChanged;
}

}  // namespace trainer::engine
