#include "engine/checkpoint/resume_check.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace trainer::engine {

ResumeCheck::ResumeCheck(std::map<int64_t, double> logged, int64_t start_step, int64_t log_every, double tolerance)
    : logged_(std::move(logged)), start_step_(start_step), log_every_(log_every), tolerance_(tolerance) {
  logged_.erase(logged_.begin(), logged_.upper_bound(start_step_));
}

void ResumeCheck::compare(int64_t step, double loss) {
  if (logged_.empty()) return;
  auto it = logged_.find(step);
  if (it != logged_.end() && step - log_every_ >= start_step_) {
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
