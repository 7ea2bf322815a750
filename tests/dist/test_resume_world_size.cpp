// A checkpoint written by 2 ranks resumes on 1, and one written by 1 rank resumes on 2: with
// train.global_batch_size set, the resumed run logs the losses of the uninterrupted run.
#include <catch2/catch.hpp>

#include <map>

#include "ckpt/ckpt_runs.hpp"
#include "spawn.hpp"
#include "train_runs.hpp"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

// 12 steps of 16 samples (global_batch_size), a checkpoint at step 6.
const std::string kResumeArgs = " --set train.global_batch_size=16 --set train.max_steps=12 --set checkpoint.every_steps=6";

std::string launcher(int world) { return world == 1 ? "run " : "launch -n " + std::to_string(world) + " -- run "; }

void check_resume_across(int saved_world, int resumed_world, const std::string& scratch) {
  auto dir = test::scratch_dir(scratch);
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto full = test::run_shell("\"" + std::string(TRAINER_BIN) + "\" " + launcher(saved_world) + cfg + kResumeArgs +
                              " --out-dir " + (dir / "full").string());
  INFO(full.output);
  REQUIRE(full.exit_code == 0);
  REQUIRE(fs::exists(dir / "full/tiny/checkpoints/step-6/manifest.json"));

  // the second run starts from the first one's step-6 checkpoint, on the other world size
  fs::create_directories(dir / "resumed/tiny/checkpoints");
  fs::copy(dir / "full/tiny/checkpoints/step-6", dir / "resumed/tiny/checkpoints/step-6", fs::copy_options::recursive);
  auto resumed = test::run_shell("\"" + std::string(TRAINER_BIN) + "\" " + launcher(resumed_world) + cfg + kResumeArgs +
                                 " --out-dir " + (dir / "resumed").string());
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("resuming a checkpoint of " + std::to_string(saved_world) + " rank(s) on " +
                            std::to_string(resumed_world)) != std::string::npos);
  CHECK(resumed.output.find("train.global_batch_size 16 kept: 8 per micro-batch x " +
                            std::to_string(2 / resumed_world) + " accumulation x " + std::to_string(resumed_world) +
                            " ranks") != std::string::npos);
  // the accumulation this world size needs is no other config (every elastic resize warned so)
  CHECK(resumed.output.find("written with a different config") == std::string::npos);

  auto a = test::train_losses(dir / "full/tiny/metrics.jsonl");
  auto b = test::train_losses(dir / "resumed/tiny/metrics.jsonl");
  REQUIRE(a.size() == 12);
  REQUIRE(b.size() == 6);  // steps 7..12
  for (int64_t s = 7; s <= 12; ++s) {
    INFO("step " << s << ": uninterrupted " << a.at(s) << ", resumed " << b.at(s));
    CHECK(b.at(s) == Approx(a.at(s)).margin(test::kLossTolerance).epsilon(0));
  }
}

}  // namespace

TEST_CASE("a 2-rank checkpoint resumed on 1 rank continues the same run", "[dist][e2e]") {
  if (test::is_worker()) return;
  check_resume_across(2, 1, "resume_2_to_1");
}

TEST_CASE("a 1-rank checkpoint resumed on 2 ranks continues the same run", "[dist][e2e]") {
  if (test::is_worker()) return;
  check_resume_across(1, 2, "resume_1_to_2");
}
