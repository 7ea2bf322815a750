// ResumeCheck (engine/checkpoint/resume_check.hpp): which recomputed records are compared, and what drift stops.
#include <catch2/catch.hpp>

#include <map>

#include "engine/checkpoint/resume_check.hpp"

using trainer::engine::ResumeCheck;

TEST_CASE("resume check: records whose interval lies after the checkpoint are compared, within the tolerance",
          "[unit]") {
  // the interrupted run logged every 2 steps up to 12; the checkpoint was at step 5
  std::map<int64_t, double> logged = {{2, 3.0}, {4, 2.9}, {6, 2.8}, {8, 2.7}, {10, 2.6}, {12, 2.5}};
  ResumeCheck check(logged, /*start_step=*/5, /*log_every=*/2, /*tolerance=*/0.01);
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
  ResumeCheck check({{4, 1.0}}, /*start_step=*/2, /*log_every=*/1, /*tolerance=*/0.0);
  CHECK_NOTHROW(check.compare(4, 1.0));  // equal: a zero tolerance accepts it
  CHECK(check.pending() == 0);           // passed the last logged step: done
  CHECK_NOTHROW(check.compare(5, 7.0));
}
