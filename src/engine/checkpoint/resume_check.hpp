// checkpoint.verify_tolerance: a resumed run recomputes the steps the interrupted run had logged
// after its checkpoint; each train record whose whole log interval it recomputed (every one when the
// checkpoint holds the interval it cut, engine/checkpoint/checkpointing.hpp) must match the logged
// loss within the relative tolerance, or the run stops: the data, the code or the config changed
// since the checkpoint.
#pragma once

#include <cstdint>
#include <map>

namespace trainer::engine {

class ResumeCheck {
 public:
  ResumeCheck() = default;  // nothing to compare (a fresh run, or the check is off)
  // `logged`: the interrupted run's train losses by step; those after `start_step` are compared when
  // the resumed run's record covers the same steps (its previous record is theirs: a resumed run may
  // log at another train.log_every). `whole_intervals`: the checkpoint put back the interval it cut,
  // so the first record covers the steps since the interrupted run's last record before the start;
  // else only those after the start.
  ResumeCheck(std::map<int64_t, double> logged, int64_t start_step, bool whole_intervals, double tolerance);

  int64_t pending() const { return static_cast<int64_t>(logged_.size()); }  // logged steps still ahead

  // The loss of the train record at `step`; throws std::runtime_error with both values when it
  // drifted. Logs a one-line verdict once the last logged step is passed.
  void compare(int64_t step, double loss);

 private:
  std::map<int64_t, double> logged_;
  std::map<int64_t, int64_t> previous_;  // a logged step -> the interrupted run's record before it (0: none)
  int64_t previous_here_ = 0;            // this run's previous record (or where its first one's steps begin)
  double tolerance_ = 0, max_diff_ = 0;
  int64_t compared_ = 0;
};

}  // namespace trainer::engine
