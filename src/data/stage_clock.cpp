#include "data/stage_clock.hpp"

namespace trainer::data {

std::atomic<bool> StageClock::on_{false};
std::array<std::atomic<int64_t>, kStages> StageClock::totals_{};

void StageClock::enable(bool on) {
  for (auto& t : totals_) t.store(0, std::memory_order_relaxed);
  on_.store(on, std::memory_order_relaxed);
}

std::array<int64_t, kStages> StageClock::totals() {
  std::array<int64_t, kStages> out{};
  for (size_t i = 0; i < kStages; ++i) out[i] = totals_[i].load(std::memory_order_relaxed);
  return out;
}

}  // namespace trainer::data
