// ResumeCheck (engine/checkpoint/resume_check.hpp): which recomputed records are compared, and what drift stops.
#include <catch2/catch.hpp>

#include <map>

#include "engine/checkpoint/resume_check.hpp"

using trainer::engine::ResumeCheck;

TEST_CASE("resume check: records whose interval lies after the checkpoint are compared, within the tolerance",
          "[unit]") {
  // the interrupted run logged every 2 steps up to 12; the checkpoint was at step 5
  std::map<int64_t, double> logged = {{2, 3.0}, {4, 2.9}, {6, 2.8}, {8, 2.7}, {10, 2.6}, {12, 2.5}};
  ResumeCheck check(logged, /*start_step=*/5, /*whole_intervals=*/false, /*tolerance=*/0.01);
  CHECK(check.pending() == 4);  // 6, 8, 10, 12
  // step 6's interval (5, 6] straddles the checkpoint: not compared, whatever its value
  CHECK_NOTHROW(check.compare(6, 100.0));
  CHECK_NOTHROW(check.compare(8, 2.7 * 1.0099));  // 0.99 % off: inside 1 %
  CHECK_THROWS_WITH(check.compare(10, 2.6 * 1.02),
                    Catch::Contains("resume check: the loss at step 10 is 2.652, but the interrupted run logged 2.6 "
                                    "(relative difference 0.02 > checkpoint.verify_tolerance 0.01)"));
}

TEST_CASE("resume check: nothing is compared past the last logged step or without a log", "[unit]") {
  ResumeCheck none;
  CHECK(none.pending() == 0);
  CHECK_NOTHROW(none.compare(3, 1e9));
  ResumeCheck check({{4, 1.0}}, /*start_step=*/2, /*whole_intervals=*/true, /*tolerance=*/0.0);
  CHECK_NOTHROW(check.compare(4, 1.0));  // equal: a zero tolerance accepts it
  CHECK(check.pending() == 0);           // passed the last logged step: done
  CHECK_NOTHROW(check.compare(5, 7.0));
}

// train.log_every may change on resume: a record is compared only when it is the mean of the same
// steps as the logged one (every 2 steps before, every 4 now: step 12 is (10, 12] in both, step 16
// is (14, 16] before and (12, 16] now). Every logged step was compared: a good run failed (exit 1).
TEST_CASE("resume check: resumed at another train.log_every, only the records over the same steps are compared",
          "[unit]") {
  std::map<int64_t, double> logged = {{2, 3.0}, {4, 2.9}, {6, 2.8}, {8, 2.7}, {10, 2.6}, {12, 2.5}, {14, 2.4}, {16, 2.3}};
  ResumeCheck every4(logged, /*start_step=*/10, /*whole_intervals=*/true, /*tolerance=*/0.01);
  CHECK_THROWS_WITH(every4.compare(12, 9.0), Catch::Contains("the loss at step 12 is 9"));
  ResumeCheck again(logged, 10, true, 0.01);
  CHECK_NOTHROW(again.compare(12, 2.5));
  CHECK_NOTHROW(again.compare(16, 100.0));  // (12, 16] against (14, 16]: not the same steps
  CHECK(again.pending() == 0);
  // every step now: none covers a logged record's two steps
  ResumeCheck every1(logged, 10, true, 0.01);
  for (int64_t s = 11; s <= 16; ++s) CHECK_NOTHROW(every1.compare(s, 100.0));
  // the checkpoint cut an interval (start 9, last record 8): every 2 again, each record compared
  ResumeCheck cut(logged, /*start_step=*/9, true, 0.01);
  CHECK_THROWS_WITH(cut.compare(10, 9.0), Catch::Contains("the loss at step 10 is 9"));
}
