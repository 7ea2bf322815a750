// The step profiler's op table: self time from nested intervals, per thread.
#include <catch2/catch.hpp>

#include "obs/profiler.hpp"

using namespace trainer::obs;

TEST_CASE("op self time is the duration less that of the ops directly inside it, per thread", "[unit]") {
  // thread 1: step [0, 100) holds conv [10, 50) which holds copy [20, 30), then relu [60, 70)
  // thread 2: another relu [0, 30), unrelated to thread 1's intervals
  std::vector<ProfiledEvent> ev = {
      {"relu", 1, 60, 70}, {"step", 1, 0, 100}, {"copy", 1, 20, 30}, {"conv", 1, 10, 50}, {"relu", 2, 0, 30},
  };
  auto ops = aggregate_ops(ev);
  auto find = [&](const std::string& n) {
    for (const auto& o : ops)
      if (o.name == n) return o;
    FAIL("no op " << n);
    return OpStat{};
  };
  const double ms = 1e-6;  // events are in ns
  CHECK(find("step").self_ms == Approx((100 - 40 - 10) * ms));
  CHECK(find("step").total_ms == Approx(100 * ms));
  CHECK(find("conv").self_ms == Approx(30 * ms));
  CHECK(find("copy").self_ms == Approx(10 * ms));
  CHECK(find("relu").calls == 2);
  CHECK(find("relu").self_ms == Approx(40 * ms));
  // sorted by self time, largest first
  for (size_t i = 1; i < ops.size(); ++i) CHECK(ops[i - 1].self_ms >= ops[i].self_ms);
  CHECK(ops.front().name == "step");

  auto text = format_op_table(ops, /*wall_ms=*/100 * ms, /*steps=*/2, /*top=*/2);
  CHECK(text.find("2 steps recorded") != std::string::npos);
  CHECK(text.find("step") != std::string::npos);
  CHECK(text.find("copy") == std::string::npos);  // beyond the top 2
}

TEST_CASE("a disabled profiler records nothing and writes nothing", "[unit]") {
  StepProfiler p(0, 0, "/nonexistent/profile", 0, false, false);
  p.before_step(0);
  CHECK(!p.active());
  p.after_step(0);
  CHECK(p.summary().empty());
}
