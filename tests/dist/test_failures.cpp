// A dead or silent peer: the surviving rank fails within dist.timeout_s + a margin, naming its rank,
// the step, the collective and its sequence number.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "dist/dist_context.hpp"
#include "spawn.hpp"

using namespace trainer;
using Catch::Matchers::Contains;

namespace {

constexpr double kTimeoutS = 5;

// The marker rank 0 leaves when its collective failed (the silent peer stays silent until then).
std::filesystem::path failed_marker() {
  return std::filesystem::path(std::getenv("TRAINER_TEST_DIR")) / "rank0.failed";
}

// Rank 0 all-reduces until it fails, then exits 1 printing the error, as `trainer run` does, and how
// long the failing collectives took ("failed after S s": the process's start-up is not counted).
void survivor_loop(dist::DistContext& ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (;;) ctx.all_reduce_mean(1.0);
  } catch (const dist::DistError& e) {
    std::fprintf(stderr, "error: %s\nfailed after %.3f s\n", e.what(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stderr);
    test::write_file(failed_marker(), "failed\n");
    std::_Exit(1);
  }
}

// The seconds of rank 0's "failed after S s" line; -1 when absent.
double failed_after_s(const std::string& output) {
  const auto at = output.find("failed after ");
  return at == std::string::npos ? -1 : std::stod(output.substr(at + 13));
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
  if (ctx->rank() == 1) {  // alive but never joins the next collective, until rank 0 gave up on it
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(test::scaled(300));
    while (!std::filesystem::exists(failed_marker()) && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::_Exit(0);
  }
  survivor_loop(*ctx);
}

TEST_CASE("a peer killed with SIGKILL makes the survivor exit non-zero naming the collective", "[dist]") {
  if (test::is_worker()) return;
  auto procs = test::run_ranks("worker: peer dies", 2, "dist_peer_dies");
  INFO("rank 0 output:\n" << procs[0].output());
  CHECK(procs[1].exit_code == 128 + SIGKILL);
  CHECK(procs[0].exit_code == 1);
  CHECK(failed_after_s(procs[0].output()) >= 0);
  CHECK(failed_after_s(procs[0].output()) < kTimeoutS + test::scaled(30));  // no hang past dist.timeout_s
  CHECK_THAT(procs[0].output(), Contains("error: rank 0: all_reduce #2 (mean) at step 7 failed: "));
}

TEST_CASE("a silent peer makes the survivor time out after dist.timeout_s naming the collective", "[dist]") {
  if (test::is_worker()) return;
  auto procs = test::run_ranks("worker: silent peer", 2, "dist_silent_peer");
  INFO("rank 0 output:\n" << procs[0].output());
  CHECK(procs[0].exit_code == 1);
  CHECK(procs[1].exit_code == 0);  // it was still there, silent, when rank 0 gave up
  CHECK(failed_after_s(procs[0].output()) >= kTimeoutS);
  CHECK(failed_after_s(procs[0].output()) < kTimeoutS + test::scaled(30));
  CHECK_THAT(procs[0].output(), Contains("error: rank 0: all_reduce #2 (mean) at step 3 failed: "));
}
