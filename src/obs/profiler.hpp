// Step profiler (config section `profile`): records `profile.steps` optimizer steps from
// `profile.start_step` with the PyTorch (Kineto) profiler and writes, per rank,
//   <run dir>/profile/trace_rank<r>.json  a Chrome trace (open in Perfetto or chrome://tracing)
//   <run dir>/profile/ops_rank<r>.txt     ATen ops by self time, per step, with their call counts
// Nothing is recorded outside that window, so the rest of the run pays nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace trainer::obs {

// One recorded event: a CPU op (or a user scope) on one thread.
struct ProfiledEvent {
  std::string name;
  uint64_t thread = 0;
  uint64_t start_ns = 0, end_ns = 0;
};

struct OpStat {
  std::string name;
  int64_t calls = 0;
  double self_ms = 0;   // the op's own time: its duration less that of the ops it called (same thread)
  double total_ms = 0;  // inclusive
};

// Per-name totals, sorted by self time (largest first). Nesting is per thread, from the intervals.
std::vector<OpStat> aggregate_ops(std::vector<ProfiledEvent> events);

// The ops table as text: the `top` largest by self time, in ms per step and as a share of the
// recorded wall time.
std::string format_op_table(const std::vector<OpStat>& ops, double wall_ms, int64_t steps, size_t top);

class StepProfiler {
 public:
  // steps == 0: disabled (every call is a no-op). cuda: also record CUDA kernels.
  StepProfiler(int64_t start_step, int64_t steps, std::filesystem::path out_dir, int64_t rank, bool cuda,
               bool record_shapes);
  ~StepProfiler();  // a window still open (the run ended inside it) is written as it stands
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Around each optimizer step; `step` counts completed steps before it (0-based index of the step).
  void before_step(int64_t step);
  void after_step(int64_t step);
  bool active() const { return active_; }
  // Set once a window was written (and logged): where the files are and the top ops.
  const std::string& summary() const { return summary_; }

 private:
  void stop_and_write();
  int64_t start_, steps_, rank_;
  std::filesystem::path dir_;
  bool cuda_, shapes_;
  bool active_ = false, done_ = false;
  int64_t recorded_ = 0;
  uint64_t wall_start_ns_ = 0;
  std::string summary_;
};

}  // namespace trainer::obs
