// A dead or silent peer: the surviving rank fails within dist.timeout_s + a margin, naming its rank,
// the step, the collective and its sequence number.
#include <catch2/catch.hpp>

#include <signal.h>

#include <thread>

#include "dist/dist_context.hpp"
#include "spawn.hpp"

using namespace trainer;
using Catch::Matchers::Contains;

namespace {

constexpr double kTimeoutS = 5;

// Rank 0 all-reduces until it fails, then exits 1 printing the error, as `trainer run` does.
void survivor_loop(dist::DistContext& ctx) {
  try {
    for (;;) ctx.all_reduce_mean(1.0);
  } catch (const dist::DistError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
}

}  // namespace

TEST_CASE("worker: peer dies", "[.worker]") {
  if (!test::is_worker()) return;
  config::DistConfig cfg;
  cfg.timeout_s = kTimeoutS;
  auto ctx = dist::DistContext::create(dist::detect_launch_env(), cfg, torch::Device(torch::kCPU), "h");
  ctx->set_step(7);
  ctx->barrier();                          // #0 is the config-hash all_gather, #1 this barrier
  if (ctx->rank() == 1) ::raise(SIGKILL);  // dies between collectives
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  survivor_loop(*ctx);
}

TEST_CASE("worker: silent peer", "[.worker]") {
  if (!test::is_worker()) return;
  config::DistConfig cfg;
  cfg.timeout_s = kTimeoutS;
  auto ctx = dist::DistContext::create(dist::detect_launch_env(), cfg, torch::Device(torch::kCPU), "h");
  ctx->set_step(3);
  ctx->barrier();
  if (ctx->rank() == 1) {  // alive but never joins the next collective
    std::this_thread::sleep_for(std::chrono::seconds(static_cast<int>(kTimeoutS) + 8));
    std::_Exit(0);
  }
  survivor_loop(*ctx);
}

TEST_CASE("a peer killed with SIGKILL makes the survivor exit non-zero naming the collective", "[dist]") {
  if (test::is_worker()) return;
  auto procs = test::run_ranks("worker: peer dies", 2, "dist_peer_dies", 120);
  INFO("rank 0 output:\n" << procs[0].output());
  CHECK(procs[1].exit_code == 128 + SIGKILL);
  CHECK(procs[0].exit_code == 1);
  CHECK(procs[0].seconds < kTimeoutS + 30);
  CHECK_THAT(procs[0].output(), Contains("error: rank 0: all_reduce #2 (mean) at step 7 failed: "));
}

TEST_CASE("a silent peer makes the survivor time out after dist.timeout_s naming the collective", "[dist]") {
  if (test::is_worker()) return;
  auto procs = test::run_ranks("worker: silent peer", 2, "dist_silent_peer", 120);
  INFO("rank 0 output:\n" << procs[0].output());
  CHECK(procs[0].exit_code == 1);
  CHECK(procs[0].seconds >= kTimeoutS);
  CHECK(procs[0].seconds < kTimeoutS + 30);
  CHECK_THAT(procs[0].output(), Contains("error: rank 0: all_reduce #2 (mean) at step 3 failed: "));
}
