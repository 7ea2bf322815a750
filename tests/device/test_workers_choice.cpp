// data.workers auto (device::choose_workers): on CUDA the share of the hardware threads but one,
// 2 to 16; on a CPU 2; a configured count kept (the key's round trip: tests/config/test_workers_auto.cpp).
#include <catch2/catch.hpp>

#include <sched.h>

#include "device/device.hpp"

using trainer::device::choose_workers;

TEST_CASE("data.workers auto: the hardware threads a GPU rank's loader takes, and 2 on a CPU", "[unit]") {
  // the H200 node of docs/PERFORMANCE.md: 16 threads, one GPU -> 15; eight GPUs share 128 -> 15
  CHECK(choose_workers(-1, true, 1, 16).workers == 15);
  CHECK(choose_workers(-1, true, 8, 128).workers == 15);
  CHECK(choose_workers(-1, true, 1, 64).workers == 16);  // capped
  CHECK(choose_workers(-1, true, 4, 8).workers == 2);    // 2 threads a rank: still 2
  CHECK(choose_workers(-1, true, 2, 1).workers == 2);
  CHECK_THAT(choose_workers(-1, true, 1, 16).why, Catch::Matchers::Contains("16 usable hardware threads / 1 local rank(s) = 16"));
  CHECK(choose_workers(-1, false, 1, 64).workers == 2);  // the CPU trains: loader threads would compete
  CHECK_THAT(choose_workers(-1, false, 1, 64).why, Catch::Matchers::Contains("on a CPU"));
  for (int64_t n : {0, 1, 7, 40}) {  // what the config says is kept, with no reason to log
    CHECK(choose_workers(n, true, 1, 16).workers == n);
    CHECK(choose_workers(n, true, 1, 16).why.empty());
  }
}

TEST_CASE("usable_cpus counts the affinity mask this thread may run on", "[unit]") {
  cpu_set_t before;
  REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
  CHECK(trainer::device::usable_cpus() == CPU_COUNT(&before));
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &before)) first = c;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);  // as `taskset -c N` or a one-core cpuset would
  const int64_t pinned = trainer::device::usable_cpus();
  REQUIRE(sched_setaffinity(0, sizeof before, &before) == 0);
  CHECK(pinned == 1);
  CHECK(choose_workers(-1, true, 1, pinned).workers == 2);  // one thread: still 2 workers
}
