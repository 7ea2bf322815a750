// Rank 0 writes checkpoints; every rank learns the outcome at the same step. A save that fails on a
// full filesystem stops both ranks at once under checkpoint.on_error: abort (not after a collective
// timeout), and lets both go on under warn.
#include <catch2/catch.hpp>

#include <chrono>

#include "ckpt/ckpt_test_util.hpp"
#include "spawn.hpp"
#include "train_runs.hpp"
#include "skip.hpp"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

// dist.timeout_s of these runs: a rank left waiting in a collective would take this long to fail
constexpr double kAgreementTimeoutS = 600;

struct Launched {
  test::CommandResult result;
  double seconds = 0;
};

// `trainer launch -n 2` of the tiny GPT, checkpointing every 2 steps into a 64 KiB tmpfs (the first
// checkpoint needs ~300 KB).
Launched launch_into_full_disk(const fs::path& dir, const std::string& on_error) {
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto t0 = std::chrono::steady_clock::now();
  Launched l;
  l.result = test::run_shell("\"" + std::string(TRAINER_BIN) + "\" launch -n 2 -- run " + cfg +
                             " --set checkpoint.every_steps=2 --set checkpoint.on_error=" + on_error +
                             " --set dist.timeout_s=" + std::to_string(test::scaled(kAgreementTimeoutS)) +
                             " --set checkpoint.dir=" + (dir / "small/checkpoints").string() + " --out-dir " +
                             (dir / "runs").string());
  l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return l;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("checkpoint.on_error abort: rank 0's failed save stops both ranks at the same step", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("ckpt_agree_abort");
  test::TmpfsMount small(dir / "small", "64k");
  if (!small.mounted()) {
    TRAINER_SKIP("cannot mount a tmpfs here (" << small.error() << ")");
  }
  auto l = launch_into_full_disk(dir, "abort");
  INFO(l.result.output);
  CHECK(l.result.exit_code == 74);  // a save the policy does not tolerate failed
  CHECK(contains(l.result.output, "No space left on device"));  // rank 0: the path and the errno
  CHECK(contains(l.result.output, "rank 0 could not save the checkpoint at step 2 (its log says why)"));  // rank 1
  CHECK(l.seconds < test::scaled(kAgreementTimeoutS) / 2);  // both stopped at once, not after dist.timeout_s
}

TEST_CASE("checkpoint.on_error warn: both ranks train on after rank 0's failed saves, the failed final save exits 74",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("ckpt_agree_warn");
  test::TmpfsMount small(dir / "small", "64k");
  if (!small.mounted()) {
    TRAINER_SKIP("cannot mount a tmpfs here (" << small.error() << ")");
  }
  auto l = launch_into_full_disk(dir, "warn --set checkpoint.max_failures=100");
  INFO(l.result.output);
  CHECK(l.result.exit_code == 74);  // trained to the end, but the end could not be saved: not "done"
  CHECK(contains(l.result.output, "the checkpoint at step 2 could not be saved; training continues (1 failed in a row"));
  CHECK(contains(l.result.output, "the final checkpoint at step 20 could not be saved"));
  test::TrainRun run;
  test::read_metrics(dir / "runs/tiny", run);
  CHECK(run.losses.size() == 20);
  CHECK(run.world_size == 0);  // read from the summary record: there is none, the run did not end "done"
}
