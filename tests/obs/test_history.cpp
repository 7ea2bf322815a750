// obs::read_history: the earlier attempts of a run directory, from metrics.jsonl alone.
#include <catch2/catch.hpp>

#include "obs/history.hpp"
#include "test_util.hpp"

using trainer::obs::read_history;

TEST_CASE("history: each attempt's measured time, the last step and the losses, from the records", "[unit]") {
  auto dir = trainer::test::scratch_dir("history");
  // attempt 1 logs to clock 2.0; attempt 2 resumes from its checkpoint at 1.5, logs to 3.0 and saves
  // at 4.0, where attempt 3 resumes; a torn last line (a kill mid-write) is skipped
  trainer::test::write_file(dir / "metrics.jsonl", R"({"kind":"attempt","attempt":1,"start_step":0,"time_s":0.0,"resumed_from":null}
{"kind":"train","step":1,"time_s":1.0,"loss":3.0}
{"kind":"train","step":2,"time_s":2.0,"loss":2.5}
{"kind":"attempt","attempt":2,"start_step":1,"time_s":1.5,"resumed_from":"c/step-1"}
{"kind":"train","step":3,"time_s":2.5,"loss":2.25}
{"kind":"eval","step":4,"time_s":3.0,"loss":2.0}
{"kind":"attempt","attempt":3,"start_step":5,"time_s":4.0,"resumed_from":"c/step-5"}
{"kind":"train","step":6,"time_s":5.0,"loss":1.5}
{"kind":"train","st)");
  const auto h = read_history(dir / "metrics.jsonl");
  CHECK(h.attempts == 3);
  // (2.0 - 0) + (max(3.0, 4.0) - 1.5) + (5.0 - 4.0)
  CHECK(h.wall_s == Approx(5.5).epsilon(1e-12));
  CHECK(h.last_step == 6);
  CHECK(h.train_losses == std::map<int64_t, double>{{1, 3.0}, {2, 2.5}, {3, 2.25}, {6, 1.5}});
}

TEST_CASE("history: a file written before attempt records is one attempt from clock 0, a missing file none",
          "[unit]") {
  auto dir = trainer::test::scratch_dir("history_old");
  trainer::test::write_file(dir / "metrics.jsonl", "{\"kind\":\"train\",\"step\":10,\"time_s\":7.5,\"loss\":1.0}\n");
  const auto h = read_history(dir / "metrics.jsonl");
  CHECK(h.attempts == 1);
  CHECK(h.wall_s == Approx(7.5));
  CHECK(h.last_step == 10);
  const auto none = read_history(dir / "absent.jsonl");
  CHECK(none.attempts == 0);
  CHECK(none.wall_s == 0);
  CHECK(none.last_step == -1);
}
