#include "engine/checkpoint/resume_check.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace trainer::engine {

ResumeCheck::ResumeCheck(std::map<int64_t, double> logged, int64_t start_step, bool whole_intervals, double tolerance)
    : logged_(std::move(logged)), previous_here_(start_step), tolerance_(tolerance) {
  int64_t before = 0;
  for (const auto& [step, loss] : logged_) {
    previous_[step] = before;
    if (step <= start_step && whole_intervals) previous_here_ = step;
    before = step;
  }
  if (whole_intervals && logged_.upper_bound(start_step) == logged_.begin()) previous_here_ = 0;
  logged_.erase(logged_.begin(), logged_.upper_bound(start_step));
}

void ResumeCheck::compare(int64_t step, double loss) {
  if (logged_.empty()) return;
  const int64_t from = std::exchange(previous_here_, step);
  auto it = logged_.find(step);
  if (it != logged_.end() && previous_.at(step) == from) {  // the same steps' mean in both runs
    const double diff = std::abs(loss - it->second) / std::max(std::abs(it->second), 1e-12);
    max_diff_ = std::max(max_diff_, diff);
    ++compared_;
    if (diff > tolerance_)
      throw std::runtime_error(fmt::format(
          "resume check: the loss at step {} is {:.6g}, but the interrupted run logged {:.6g} (relative difference "
          "{:.3g} > checkpoint.verify_tolerance {:g}): the data, the code or the config changed since the checkpoint. "
          "Set checkpoint.verify_tolerance: 0 to continue anyway",
          step, loss, it->second, diff, tolerance_));
  }
  if (step >= logged_.rbegin()->first) {
    if (compared_ > 0)
      spdlog::info("resume check: {} logged step(s) recomputed, max relative loss difference {:.2g} (tolerance {:g})",
                   compared_, max_diff_, tolerance_);
    logged_.clear();
  }
}

}  // namespace trainer::engine
