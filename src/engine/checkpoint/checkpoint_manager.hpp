// The checkpoint policy of a run, over engine/checkpoint/checkpointing (what a checkpoint holds) and
// io::CheckpointStore (atomic, verified storage): which checkpoint a run resumes from, when a save
// may fail and when it may not, `best`, rollback to the last good state, and SLURM requeue.
//
// Saves: rank 0 writes the checkpoint (the whole model, gathered first under dist.sharding full;
// a replicated run's optimizer state); under dist.sharding every rank first stages its optimizer
// shard (stage_shards), which rank 0's save moves in. Every rank learns the outcome at the same
// step, so the ranks stop together. A periodic save that fails is tolerated up
// to checkpoint.max_failures times in a row under on_error: warn; the final save and the save a
// stop signal asked for are never optional. A save the policy cannot tolerate throws
// CheckpointFailed (exit 74). Weights holding inf/NaN are never saved.
//
// Resume (--resume auto): the newest checkpoint that verifies and restores; a newer one that does not
// is reported and skipped. When checkpoints exist but none can be used the run stops, listing each
// one and why: starting over would bury them.
#pragma once

#include <filesystem>
#include <map>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "config/config.hpp"
#include "dist/dist_context.hpp"
#include "dist/launch_env.hpp"
#include "engine/checkpoint/checkpointing.hpp"
#include "engine/checkpoint/resume_options.hpp"
#include "engine/step/step_runner.hpp"
#include "io/checkpoint.hpp"

namespace trainer::engine {

// A save the policy does not allow to fail failed: the run ends with kExitCheckpointFailed.
class CheckpointFailed : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class SaveKind { Periodic, Final, Signal, DataChanged };

struct Resumed {
  std::filesystem::path from;
  RunPosition pos;
};

class CheckpointManager {
 public:
  // `position(step)` gives the run's position at a save (loader state, clock).
  CheckpointManager(const config::RunConfig& cfg, const dist::LaunchEnv& env, dist::DistContext* dist,
                    const std::filesystem::path& run_root, RunObjects objs,
                    std::function<RunPosition(int64_t)> position);

  // --resume auto | never | PATH (resume_options.hpp). Rank 0 opens the store first (it clears temporaries of dead saves).
  // Every rank restores the same checkpoint (checked across ranks) into the run objects.
  std::optional<Resumed> resume(const ResumeOptions& how);

  // Returns true when the checkpoint was written; false for a tolerated failure (warned).
  bool save(int64_t step, SaveKind kind);

  // checkpoint.save_best: the evaluation at `step` set a new best; its checkpoint becomes `best`.
  void keep_best(int64_t step, bool saved_at_step);

  // train.nonfinite: rollback. Restores the newest verified checkpoint older than `step` and returns
  // its step; throws after train.max_nonfinite rollbacks to the same checkpoint.
  int64_t roll_back(int64_t step);

  // A stop signal: one checkpoint at this step boundary (every rank, then a barrier), requeue when
  // asked, and the exit code 75. A stop before the first step (`step == start_step`) has nothing new
  // to save, the run resumes where it stands, unless it resumed from another run's folder: then its
  // own folder gets that state, saved at this run's layout. A save that fails throws (exit 74) instead.
  int stop_for_signal(int64_t step, int64_t start_step);

  // A data file changed under the run (data.on_change error, or a reload that failed), agreed by
  // every rank at this step boundary (engine/loop/data_change.hpp): the same as a stop signal's
  // checkpoint (every rank, sharded strategies included, then a barrier), then kExitDataChanged
  // (65). A save that fails throws (exit 74).
  int stop_for_data_change(int64_t step, int64_t start_step, const std::string& what);

  // checkpoint.requeue under SLURM: `scontrol requeue` this job (rank 0) before exiting 75.
  void requeue_if_asked() const;

  // After an in-process regroup: the strategy the saves ask for their shard layout; and, on the
  // rank that became rank 0, the store it now writes (opening it clears the lost rank 0's
  // unfinished saves).
  void set_parallel(const DataParallel* parallel) { objs_.parallel = parallel; }
  void become_writer();

  // The log interval in progress (the step runner's): every save records each rank's (a collective
  // of every rank, like the save), a resume and a rollback put this rank's back, so that the first
  // record after them is the whole interval's mean. Unset: not recorded.
  struct IntervalAccess {
    std::function<StepRunner::Interval()> get;
    std::function<void(const StepRunner::Interval&)> set;
  };
  void set_interval_access(IntervalAccess a) { interval_ = std::move(a); }

 private:
  std::optional<Resumed> resume_newest();
  std::string nonfinite_parameter() const;
  // Sharded runs: every rank writes its optimizer shard next to the checkpoint folder, in parallel;
  // returns rank 0's content with every rank's staged file to move in (undefined on other ranks),
  // or the failure text (agreed: any rank's failure fails the save on all).
  std::string stage_shards(int64_t step, std::map<std::string, std::filesystem::path>& staged);
  // Tensor parallel: the tp ranks of dp rank 0 but rank 0 write their parts next to the folder; the
  // same agreement as stage_shards.
  std::string stage_tp_parts(int64_t step, const TpParts& parts, std::map<std::string, std::filesystem::path>& staged);
  // Every rank's interval, on rank 0 (a collective when several ranks); nullopt without access.
  std::optional<LossInterval> gather_interval(int64_t step);
  // This rank's part of `pos`' interval into the step runner (another number of ranks saved it: the
  // ranks' mean, the record's mean up to rounding); `with_skips`: the fp16 skip count too.
  void put_back_interval(const RunPosition& pos, bool with_skips);

  const config::RunConfig& cfg_;
  const dist::LaunchEnv& env_;
  dist::DistContext* dist_;  // null or inactive for a single process
  std::filesystem::path dir_;
  std::string run_root_;  // the run directory, canonical: saved in state.json as run_dir
  RunObjects objs_;
  std::function<RunPosition(int64_t)> position_;
  std::unique_ptr<io::CheckpointStore> store_;  // rank 0 only
  int64_t failed_in_row_ = 0;
  int64_t last_failed_step_ = -1;  // the step of the last save that failed
  int64_t rollback_target_ = -1, rollbacks_to_target_ = 0;
  bool start_elsewhere_ = false;  // resumed from a checkpoint outside dir_ (--resume PATH)
  int64_t starts_ = 0;            // looks for the start (resume), again after a rank lost at start-up
  IntervalAccess interval_;
};

}  // namespace trainer::engine
