// Where a loader's time goes, per stage of a sample (read the file, decode it, augment it into the
// batch's slot) and per batch (collate: the raw batch to the model's dtype and layout), summed over
// every thread that builds batches. For `trainer bench-data` (engine/commands/bench_data): off by
// default, when each stage costs one relaxed atomic load; turned on, a clock read at each edge.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace trainer::data {

enum class Stage { Read, Decode, Sample, Collate };  // Sample: a whole fill() (read + decode + augment)
inline constexpr size_t kStages = 4;

class StageClock {
 public:
  static void enable(bool on);  // also zeroes the totals
  static bool enabled() { return on_.load(std::memory_order_relaxed); }
  static void add(Stage s, int64_t ns) { totals_[static_cast<size_t>(s)].fetch_add(ns, std::memory_order_relaxed); }
  static std::array<int64_t, kStages> totals();  // nanoseconds per stage since enable(true)

 private:
  static std::atomic<bool> on_;
  static std::array<std::atomic<int64_t>, kStages> totals_;
};

// Adds the time of its scope to `stage` when the clock is on.
class StageTimer {
 public:
  explicit StageTimer(Stage s) : stage_(s), on_(StageClock::enabled()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~StageTimer() {
    if (on_)
      StageClock::add(stage_, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_)
                                  .count());
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  Stage stage_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace trainer::data
