#include "obs/profiler.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

namespace trainer::obs {
namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

std::string cut(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }

}  // namespace

std::vector<OpStat> aggregate_ops(std::vector<ProfiledEvent> events) {
  // per thread, by start (an enclosing op first: earlier start, or the same start and a later end)
  std::sort(events.begin(), events.end(), [](const ProfiledEvent& a, const ProfiledEvent& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  std::map<std::string, OpStat> by_name;
  struct Open {
    const ProfiledEvent* e;
    uint64_t child_ns;
  };
  std::vector<Open> stack;
  auto close = [&](const Open& o) {
    auto& s = by_name[o.e->name];
    const uint64_t dur = o.e->end_ns - o.e->start_ns;
    s.name = o.e->name;
    s.calls += 1;
    s.total_ms += static_cast<double>(dur) / 1e6;
    s.self_ms += static_cast<double>(dur - std::min(dur, o.child_ns)) / 1e6;
  };
  uint64_t thread = 0;
  for (const auto& e : events) {
    if (e.end_ns < e.start_ns) continue;
    if (e.thread != thread) {
      while (!stack.empty()) close(stack.back()), stack.pop_back();
      thread = e.thread;
    }
    while (!stack.empty() && stack.back().e->end_ns <= e.start_ns) close(stack.back()), stack.pop_back();
    if (!stack.empty()) stack.back().child_ns += e.end_ns - e.start_ns;  // a direct child of the innermost open op
    stack.push_back({&e, 0});
  }
  while (!stack.empty()) close(stack.back()), stack.pop_back();
  std::vector<OpStat> out;
  for (auto& [name, s] : by_name) out.push_back(std::move(s));
  std::sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) { return a.self_ms > b.self_ms; });
  return out;
}

std::string format_op_table(const std::vector<OpStat>& ops, double wall_ms, int64_t steps, size_t top) {
  const double per = static_cast<double>(std::max<int64_t>(steps, 1));
  double self_sum = 0;
  for (const auto& o : ops) self_sum += o.self_ms;
  std::string s = fmt::format("{} steps recorded, {:.1f} ms wall ({:.2f} ms per step); the ops' self time covers "
                              "{:.1f} % of it (the rest: the loop, waits, threads outside ATen)\n",
                              steps, wall_ms, wall_ms / per, wall_ms > 0 ? 100.0 * self_sum / wall_ms : 0.0);
  s += fmt::format("{:<48} {:>10} {:>12} {:>8} {:>13}\n", "op", "calls/step", "self ms/step", "self %",
                   "total ms/step");
  for (size_t i = 0; i < ops.size() && i < top; ++i) {
    const auto& o = ops[i];
    s += fmt::format("{:<48} {:>10.1f} {:>12.3f} {:>8.1f} {:>13.3f}\n", cut(o.name, 48),
                     static_cast<double>(o.calls) / per, o.self_ms / per, wall_ms > 0 ? 100.0 * o.self_ms / wall_ms : 0.0,
                     o.total_ms / per);
  }
  return s;
}

StepProfiler::StepProfiler(int64_t start_step, int64_t steps, std::filesystem::path out_dir, int64_t rank, bool cuda,
                           bool record_shapes)
    : start_(start_step), steps_(steps), rank_(rank), dir_(std::move(out_dir)), cuda_(cuda), shapes_(record_shapes) {}

StepProfiler::~StepProfiler() {
  if (!active_) return;
  try {
    stop_and_write();
  } catch (const std::exception& e) {
    spdlog::warn("profile: could not write the partial window: {}", e.what());
  }
}

void StepProfiler::before_step(int64_t step) {
  if (steps_ <= 0 || done_ || active_ || step < start_) return;
  std::set<impl::ActivityType> activities = {impl::ActivityType::CPU};
  if (cuda_) activities.insert(impl::ActivityType::CUDA);
  // a CPU run on a CUDA build of LibTorch: libkineto's start-up asks for GPUs and prints "ERROR: ...
  // gpuGetDeviceCount failed" where there is no driver, which reads as the run's failure (found from
  // outside). Its messages are muted for CPU runs unless KINETO_LOG_LEVEL is set (level 5: above ERROR).
  if (!cuda_) ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/shapes_);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  active_ = true;
  recorded_ = 0;
  wall_start_ns_ = now_ns();
  spdlog::info("profile: recording steps {}..{}", step + 1, step + steps_);
}

void StepProfiler::after_step(int64_t step) {
  if (!active_) return;
  if (++recorded_ >= steps_) stop_and_write();
}

void StepProfiler::stop_and_write() {
  auto result = prof::disableProfiler();
  const double wall_ms = static_cast<double>(now_ns() - wall_start_ns_) / 1e6;
  active_ = false;
  done_ = true;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw std::runtime_error(fmt::format("profile: cannot create {}: {}", dir_.string(), ec.message()));
  const auto trace = dir_ / fmt::format("trace_rank{}.json", rank_);
  result->save(trace.string());

  std::vector<ProfiledEvent> cpu;
  std::map<std::string, OpStat> kernels;
  for (const auto& e : result->events()) {
    if (e.deviceType() == c10::DeviceType::CPU) {
      cpu.push_back({e.name(), e.startThreadId(), e.startNs(), e.endNs()});
    } else {  // device kernels and copies: no nesting, total time per name
      auto& k = kernels[e.name()];
      k.name = e.name();
      k.calls += 1;
      k.total_ms += static_cast<double>(e.durationNs()) / 1e6;
      k.self_ms = k.total_ms;
    }
  }
  const auto ops = aggregate_ops(std::move(cpu));
  std::string text = "CPU ops by self time (per step)\n" + format_op_table(ops, wall_ms, recorded_, 60);
  if (!kernels.empty()) {
    std::vector<OpStat> ks;
    for (auto& [n, k] : kernels) ks.push_back(k);
    std::sort(ks.begin(), ks.end(), [](const OpStat& a, const OpStat& b) { return a.total_ms > b.total_ms; });
    text += "\nDevice kernels and copies by time (per step)\n" + format_op_table(ks, wall_ms, recorded_, 40);
  }
  const auto table = dir_ / fmt::format("ops_rank{}.txt", rank_);
  std::ofstream f(table);
  f << text;
  if (!f) throw std::runtime_error("profile: cannot write " + table.string());
  summary_ = fmt::format("profile: {} steps, {:.1f} ms per step; wrote {} and {}", recorded_,
                         wall_ms / static_cast<double>(std::max<int64_t>(recorded_, 1)), trace.string(),
                         table.string());
  for (size_t i = 0; i < ops.size() && i < 3; ++i)
    summary_ += fmt::format("{} {} {:.1f} %", i == 0 ? "; top self time:" : ",", ops[i].name,
                            wall_ms > 0 ? 100.0 * ops[i].self_ms / wall_ms : 0.0);
  spdlog::info("{}", summary_);
}

}  // namespace trainer::obs
