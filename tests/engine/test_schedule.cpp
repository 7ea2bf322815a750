// LR schedules against their closed forms at chosen steps (values worked out by hand below).
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/optim/schedule.hpp"

using trainer::config::ScheduleConfig;
using trainer::engine::LrSchedule;

namespace {
ScheduleConfig sched(const std::string& name, int64_t warmup, double min_ratio) {
  ScheduleConfig c;
  c.name = trainer::config::parse_enum<trainer::config::ScheduleKind>(name, "schedule");
  c.warmup_steps = warmup;
  c.min_lr_ratio = min_ratio;
  return c;
}
}  // namespace

TEST_CASE("constant schedule: linear warmup then the base rate", "[unit]") {
  LrSchedule s(sched("constant", 4, 0.5), 0.1, 100);
  CHECK(s.lr_at(0) == Approx(0.025));  // 0.1 * 1/4
  CHECK(s.lr_at(3) == Approx(0.1));    // 0.1 * 4/4
  CHECK(s.lr_at(4) == Approx(0.1));
  CHECK(s.lr_at(99) == Approx(0.1));   // the floor does not apply to a constant rate
}

TEST_CASE("step schedule: gamma every step_size steps after warmup, never below the floor", "[unit]") {
  auto c = sched("step", 10, 0.005);
  c.step_size = 30;
  c.gamma = 0.1;
  LrSchedule s(c, 1.0, 1000);
  CHECK(s.lr_at(9) == Approx(1.0));
  CHECK(s.lr_at(10) == Approx(1.0));   // 0 steps since warmup
  CHECK(s.lr_at(39) == Approx(1.0));   // 29 // 30 = 0
  CHECK(s.lr_at(40) == Approx(0.1));   // 30 // 30 = 1
  CHECK(s.lr_at(70) == Approx(0.01));  // 60 // 30 = 2
  CHECK(s.lr_at(100) == Approx(0.005));  // 0.001 is under the floor 1.0 * 0.005
}

TEST_CASE("linear schedule decays from base to the floor over the post-warmup steps", "[unit]") {
  LrSchedule s(sched("linear", 10, 0.1), 2.0, 110);  // 100 decay steps, floor 0.2
  CHECK(s.lr_at(4) == Approx(1.0));   // 2.0 * 5/10
  CHECK(s.lr_at(10) == Approx(2.0));  // p = 0
  CHECK(s.lr_at(35) == Approx(0.2 + 1.8 * 0.75));  // p = 25/100
  CHECK(s.lr_at(60) == Approx(1.1));   // p = 0.5: 0.2 + 1.8 * 0.5
  CHECK(s.lr_at(110) == Approx(0.2));  // p = 1
  CHECK(s.lr_at(500) == Approx(0.2));  // past the end: held at the floor
}

TEST_CASE("cosine schedule follows the half cosine between base and floor", "[unit]") {
  LrSchedule s(sched("cosine", 0, 0.0), 0.4, 100);
  CHECK(s.lr_at(0) == Approx(0.4));
  CHECK(s.lr_at(50) == Approx(0.2));                                  // cos(pi/2) = 0
  CHECK(s.lr_at(25) == Approx(0.2 * (1 + std::sqrt(0.5))));           // cos(pi/4)
  CHECK(s.lr_at(75) == Approx(0.2 * (1 - std::sqrt(0.5))));           // cos(3pi/4)
  CHECK(s.lr_at(100) == Approx(0.0).margin(1e-12));
  LrSchedule f(sched("cosine", 20, 0.25), 1.0, 120);
  CHECK(f.lr_at(19) == Approx(1.0));
  CHECK(f.lr_at(70) == Approx(0.25 + 0.75 * 0.5));  // halfway through 100 decay steps
  CHECK(f.lr_at(120) == Approx(0.25));
}

TEST_CASE("unknown schedule name lists the known ones", "[unit]") {
  REQUIRE_THROWS_WITH(sched("onecycle", 0, 0), "unknown schedule 'onecycle'; known: constant, step, linear, cosine");
}
