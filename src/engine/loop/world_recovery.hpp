// dist.recovery in_process, beside the strategy (as torchtitan keeps its fault-tolerance manager
// apart from the training loop): the state that changes with the world and the decisions a changed
// world asks for. The Trainer keeps the loop and the wiring: it tells this component where a step
// stands (begin_step, step_ran, recorded), hands it a DistError, and rebuilds what it is asked to
// through WorldParts, for the world this component holds (env: this rank's number and the group's
// size; grad_accum at that size). What is decided here:
//   a failure   the survivors regroup (engine/world_change.hpp); the step in flight counts once it
//               passed its commit vote, else the loader goes back to where it began; a record the
//               failure interrupted is written again; the first rank 0 after rank 0's loss writes
//   growth      at an agreed step boundary the waiting replacements are admitted (rank 0's state
//               goes to them over the process group: engine/peer_state.hpp)
//   joining     a replacement takes rank 0's state and the loop goes on at its step
//   counting    the samples of the steps before each change (records and summary count them at
//               the world that ran them)
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "obs/records.hpp"
#include "config/config.hpp"
#include "data/loader.hpp"
#include "dist/dist_context.hpp"
#include "dist/launch_env.hpp"
#include "engine/checkpoint/checkpointing.hpp"
#include "engine/loop/world_change.hpp"

namespace trainer::engine {

// What the trainer rebuilds and provides when the world changes (its wiring).
class WorldParts {
 public:
  virtual ~WorldParts() = default;
  // The world-size parts for the current group: the strategy (its prepare checks every rank holds
  // the same weights), the loader at `pos` re-sharded, the evaluator, the step runner (the interval's
  // loss kept). WorldRecovery's env() and grad_accum() are the new group's when this is called.
  virtual void rebuild_world(const data::LoaderState& pos) = 0;
  virtual data::LoaderState loader_state() const = 0;
  virtual RunObjects objects() = 0;
  virtual RunPosition position(int64_t step) const = 0;
  virtual int64_t last_logged_step() const = 0;  // the newest step metrics.jsonl holds (-1: none)
};

// The samples a run has consumed, counted at the world size of each stretch of steps.
class SampleCount {
 public:
  explicit SampleCount(int64_t per_step = 0) : per_step_(per_step) {}
  int64_t per_step() const { return per_step_; }
  int64_t at(int64_t step) const { return before_ + (step - from_step_) * per_step_; }
  // From `step` on, `per_step` samples per step (the steps before keep theirs).
  void change(int64_t step, int64_t per_step) {
    before_ = at(step);
    from_step_ = step;
    per_step_ = per_step;
  }
  // A joiner: the run's samples are counted from `step` (its earlier ones are not this process's)
  void start_at(int64_t step) { from_step_ = step; }
  // A resume: `before` samples were trained up to `step` (at the world sizes that ran them)
  void resume_at(int64_t step, int64_t before) {
    from_step_ = step;
    before_ = before;
  }

 private:
  int64_t per_step_ = 0, before_ = 0, from_step_ = 0;
};

// How far the step in flight got when a collective failed.
struct StepProgress {
  bool step_done = false;  // it passed its commit vote: every rank stepped
  bool recorded = true;    // its record (if it was a log step) is written
};

// What a failure leaves: where the loader goes on from, whether the last record is written again.
struct AfterFailure {
  data::LoaderState loader;
  bool redo_record = false;
};
AfterFailure after_failure(const StepProgress& p, const data::LoaderState& now, const data::LoaderState& at_step_start,
                           bool record_pending);

// After a regroup: this rank writes the run's records and checkpoints now (rank 0 was lost).
inline bool takes_over_writing(const dist::DistContext::Regrouped& g) { return g.old_rank != 0 && g.rank == 0; }

class WorldRecovery {
 public:
  // `env`: the launcher's; `cfg`: the run's settings (batch_size, grad_accum as chosen at start-up);
  // `config_hash`: of the config as loaded (a joiner's must be rank 0's).
  // `device`: the run's (its random generators are rewound with an abandoned step).
  WorldRecovery(dist::DistContext& dist, const dist::LaunchEnv& env, const config::RunConfig& cfg,
                std::string config_hash, WorldParts& parts, torch::Device device);

  // --- the world as it stands (what the trainer builds its world-size parts for) ------------------
  // The launcher's env with this rank's number and the size of the current group (a regroup
  // renumbers them); references to it stay valid for this object's life.
  const dist::LaunchEnv& env() const { return env_; }
  int64_t grad_accum() const { return train_.grad_accum; }  // micro-batches per step at this world size

  // --- the step in flight ------------------------------------------------------------------------
  // The record a failure interrupted on any survivor is to be written before the next step by every
  // rank (with last_grad_norm(), at last_step_world()); it stays due until begin_step.
  bool record_pending() const { return record_pending_; }
  // This rank had written (or, not being the writer, taken part in) that record before the failure:
  // it redoes it with the loss it recorded, and the writer does not write the line again.
  bool recorded_here() const { return recorded_here_; }
  // Before a step: the loader position its micro-batches start at (and the random generators' state:
  // a step given up is redone with the draws it made, its dropout key first, as a checkpoint of the
  // step before resumes it).
  void begin_step(const data::LoaderState& loader);
  // The step ran on every rank and `steps_done` are done; `log_step`: its record is still to come.
  void step_ran(int64_t steps_done, bool log_step, const torch::Tensor& grad_norm);
  // After the step: its record (if `logged`) is written.
  void recorded(bool logged) {
    progress_.recorded = true;
    if (logged) interval_world_ = 0;
  }
  // The most ranks that ran a step since the last record: more than now, a lost rank's losses of the
  // interval never arrived (the record says so: loss_ranks)
  int64_t interval_world() const { return interval_world_; }
  // The record a failure interrupted is written again (before the step's owed save: a checkpoint
  // taken first held its interval's losses, and a resume from it averaged them into the next record)
  void record_redone() {
    record_pending_ = false;
    progress_.recorded = true;
    interval_world_ = 0;
  }
  void reset_progress() { progress_ = {}; }
  // The step in flight is given up (a data change): where the loader goes on, after it once it ran
  // on every rank, else where its micro-batches began (the random generators put back there too).
  data::LoaderState give_up_step();

  // --- the step boundary -------------------------------------------------------------------------
  // What the ranks agreed at a step boundary.
  struct Boundary {
    bool stop = false;        // a stop signal: a checkpoint, exit 75
    std::string data_change;  // a data file changed: what the first rank that found it says ("" none)
  };
  // Whether the ranks agree to stop for a signal after `step`, and whether a data file changed on
  // any rank (`check_data`: this rank's look at its files, "" unchanged; the loader's own check
  // inside a step is one rank's, which its peers, waiting in the step's collectives, cannot hear).
  // The same agreement says whether rank 0 proposed to admit waiting replacements (grow_due). With
  // several ranks agreeing costs a collective and a host sync: only on log steps, every
  // kStopCheckEvery steps and when `data_due` (the next step's batches begin an epoch: the loader
  // checks the files then), the same steps on every rank. One process: the signal and its own
  // look at the files on those steps (no peer to agree with; the loader's look at epoch boundaries
  // covers the training files only).
  Boundary agree_stop(int64_t step, bool log_step, bool final_step, bool data_due,
                      const std::function<std::string()>& check_data);
  bool grow_due() const { return grow_due_; }
  // Every rank at the boundary after `step` admits the replacements (grow_due).
  void grow(int64_t step);

  // --- failures and joining ----------------------------------------------------------------------
  // What the survivors still owe after a regroup, agreed in the same collective as the record's redo.
  struct Owed {
    // the committed step's save and evaluation: in, this rank's view (not done here); out, the new
    // group's rank 0's (the writer: the outputs are its)
    bool milestones = false;
    // the start (the look for the checkpoint to start from, before the first step): in, not completed
    // here; out, not completed on some survivor: every survivor looks again (one that had completed it
    // stood in the first vote while another redid the look's collectives)
    bool start = false;
  };
  // A collective failed at `step` (committed steps): regroups the survivors and rebuilds the world.
  // Returns true when this rank takes over writing the run's records and checkpoints (rank 0 was
  // lost). Throws std::runtime_error when the run cannot go on in process.
  bool recover(const std::string& why, int64_t step, Owed& owed);
  // A replacement rank: joins the running group and takes rank 0's state; nullopt when the run ended
  // first. Returns the step and the training clock the run goes on at.
  struct Joined {
    int64_t step = 0;
    double time_s = 0;
  };
  std::optional<Joined> join();
  bool joined() const { return joined_; }  // this process is a replacement that joined mid-run

  // --- what the records read ---------------------------------------------------------------------
  int64_t samples_per_step() const { return samples_.per_step(); }
  int64_t samples_at(int64_t step) const { return samples_.at(step); }
  // A resume from a checkpoint that counted `samples` up to `step` (an earlier attempt may have run at
  // another world size: step x samples per step would miscount them)
  void resumed_at(int64_t step, int64_t samples) { samples_.resume_at(step, samples); }
  int64_t last_step_world() const { return last_step_world_; }  // the ranks that ran the last step
  const torch::Tensor& last_grad_norm() const { return last_norm_; }
  // every change of the group's size this process took part in, in order (the writer records them)
  const std::vector<obs::WorldRecord>& world_changes() const { return changes_; }

 private:
  void change_world(int64_t step, int64_t grad_accum, const data::LoaderState& pos);

  dist::DistContext& dist_;
  const config::RunConfig& cfg_;  // the run's (for the state a joiner receives)
  std::string config_hash_;
  WorldParts& parts_;
  dist::LaunchEnv env_;        // rank and world_size of the current group
  config::TrainConfig train_;  // batch_size, grad_accum at the current world size
  SampleCount samples_;
  // the samples per step every world size aims at: train.global_batch_size, else the start's. Not the
  // current world's: one that did not divide it (3 ranks of 8 for 32: 48) made the next, 4 ranks,
  // keep that accumulation and train at 64 to the end.
  int64_t target_global_;
  std::optional<RegroupPlan> regroup_;      // the last in-process regroup, until its first step is done
  data::LoaderState loader_at_step_start_;  // where an abandoned step's micro-batches began
  io::NamedTensors rng_at_step_start_;      // the generators' state then (engine/optim/train_state.hpp)
  torch::Device device_;
  torch::Tensor last_norm_;                 // the last step's gradient norm (a record redone after a regroup)
  StepProgress progress_;                   // how far the step in flight got
  bool record_pending_ = false;             // a failure interrupted the record of the last step (agreed)
  bool recorded_here_ = false;              // ... which this rank had completed
  bool last_log_step_ = false;              // the last step that ran was a log step
  bool grow_due_ = false;                   // the ranks agreed to admit replacements at this boundary
  bool joined_ = false;
  int64_t last_step_world_ = 1;
  int64_t interval_world_ = 0;  // interval_world()
  int64_t idle_regroups_ = 0;  // regroups that lost no member since the last step ran (a step resets it)
  std::vector<obs::WorldRecord> changes_;
};

}  // namespace trainer::engine
