// Dropout through pipeline stages (models/unit_rng.hpp): each unit draws its masks from a stream of
// (the step's key, the microbatch, the unit), so `trainer launch` at pp 2 and 4, every schedule,
// uneven stages and activation checkpointing log the losses of one process whose micro-batches are
// the pipeline's microbatches, within 1e-6 relative for 10 AdamW steps, and so do dp 2 (DDP and
// dist.sharding full) and pp 2 x dp 2 (each micro-batch keyed by its place in the global batch); a
// pp 2 checkpoint resumes at pp 2 bit for bit and in one process with one process's masks (every
// rank's default stream stays the one the checkpoint stores).
#include <catch2/catch.hpp>

#include "spawn.hpp"
#include "tp2d_runs.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace pp_dropout {  // named: the unity build joins the dist tests

// the tiny GPT with dropout 0.1 on the embeddings, attention and residuals; 10 steps at global batch 16
const std::string kDropArgs = test::tp2d::kArgs + " --set model.dropout=0.1";
// one process in micro-batches of 2 (accumulation 8): a pp run's batch of 8 in its 4 microbatches
const std::string kMicro2 = " --set train.batch_size=2";

test::TrainRun single(const std::string& cfg, const std::filesystem::path& out, const std::string& extra = "") {
  auto run = test::train_tiny_gpt("", "run " + cfg + kDropArgs + extra, out);
  test::tp2d::require_trained(run, test::tp2d::kSteps, 1);
  return run;
}

// a batch of 8 in 4 microbatches of 2 (auto would take up to 2 P v)
const std::string kM4 = " --set dist.pipeline.microbatches=4";

test::TrainRun pipelined(int n, const std::string& cfg, const std::string& layout, const std::filesystem::path& out) {
  auto run = test::train_tiny_gpt("", "launch -n " + std::to_string(n) + " -- run " + cfg + kDropArgs + kM4 + layout, out);
  test::tp2d::require_trained(run, test::tp2d::kSteps, n);
  return run;
}

}  // namespace pp_dropout


TEST_CASE("pp 2 and 4 with dropout 0.1 log the losses of one process in the pipeline's microbatches", "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_dropout");
  auto cfg = test::write_tiny_gpt_config(dir).string();  // 2 blocks: 4 units
  auto one = pp_dropout::single(cfg, dir / "one", pp_dropout::kMicro2);
  // the masks are drawn per micro-batch: one process in micro-batches of 8 draws others, and its
  // losses leave those of micro-batches of 2 (so the equalities below see the dropout)
  auto one8 = pp_dropout::single(cfg, dir / "one8");
  double apart = 0;
  for (size_t i = 0; i < test::tp2d::kSteps; ++i)
    apart = std::max(apart, std::abs(one8.losses[i] - one.losses[i]) / one.losses[i]);
  CHECK(apart > 1e-4);

  const std::string pp2 = " --set dist.pipeline_parallel=2";
  for (const auto& [name, layout] : std::vector<std::pair<std::string, std::string>>{
           {"1f1b", pp2},
           {"gpipe", pp2 + " --set dist.pipeline.schedule=gpipe"},
           {"interleaved", pp2 + " --set dist.pipeline.schedule=interleaved_1f1b --set dist.pipeline.virtual_stages=2"},
           {"zero_bubble_ac", pp2 + " --set dist.pipeline.schedule=zero_bubble --set model.activation_checkpointing=true"},
           {"uneven", pp2 + " --set dist.pipeline.stages=[0,1-3]"}}) {
    auto pp = pp_dropout::pipelined(2, cfg, layout, dir / name);
    test::tp2d::check_same_losses(one, pp, name.c_str());
  }
  auto pp4 = pp_dropout::pipelined(4, cfg, " --set dist.pipeline_parallel=4", dir / "pp4");
  test::tp2d::check_same_losses(one, pp4, "pp 4");
}

TEST_CASE("pp 2 with dropout: a checkpoint resumes bit for bit at pp 2, and in one process with its masks",
          "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_dropout_resume");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string pp2 = " --set dist.pipeline_parallel=2";
  auto whole = pp_dropout::pipelined(2, cfg, pp2, dir / "whole");
  auto one = pp_dropout::single(cfg, dir / "one", pp_dropout::kMicro2);
  auto first = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + pp_dropout::kDropArgs + pp_dropout::kM4 + pp2 + " --set train.max_steps=5",
                                    dir / "first");
  test::tp2d::require_trained(first, 5, 2);
  for (const auto& [name, n] : std::vector<std::pair<std::string, int>>{{"at_pp2", 2}, {"at_one", 1}}) {
    std::filesystem::copy(dir / "first", dir / name, std::filesystem::copy_options::recursive);
    const std::string resume = " --resume " + (dir / name / "tiny" / "checkpoints").string();
    auto rest = n == 1 ? test::train_tiny_gpt("", "run " + cfg + pp_dropout::kDropArgs + pp_dropout::kMicro2 + resume, dir / name)
                       : test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + pp_dropout::kDropArgs + pp_dropout::kM4 + pp2 + resume, dir / name);
    INFO(name << "\n" << rest.output);
    REQUIRE(rest.exit_code == 0);
    REQUIRE(rest.losses.size() == test::tp2d::kSteps);
    if (n == 2)
      for (size_t i = 5; i < test::tp2d::kSteps; ++i) {
        INFO("step " << i + 1);
        CHECK(rest.losses[i] == whole.losses[i]);  // the same ranks, the same arithmetic, the same masks
      }
    else
      test::tp2d::check_same_losses(one, rest, "a pp 2 checkpoint resumed in one process", 5);
  }
}

// Each data-parallel rank's micro-batch is keyed by its place in the global batch (rank r holds
// [r B, (r + 1) B) of each: data/sampler.hpp), so dp ranks draw one process's masks too.
TEST_CASE("dp 2, dp 2 with dist.sharding full, and pp 2 x dp 2 with dropout log one process's losses at their micro-batch",
          "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("dp_dropout");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto one8 = pp_dropout::single(cfg, dir / "one8");  // micro-batches of 8, accumulation 2
  for (const auto& [name, layout] : std::vector<std::pair<std::string, std::string>>{
           {"ddp", ""}, {"zero3", " --set dist.sharding=full"}}) {
    auto dp = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + pp_dropout::kDropArgs + layout, dir / name);
    test::tp2d::require_trained(dp, test::tp2d::kSteps, 2);
    test::tp2d::check_same_losses(one8, dp, name.c_str());
  }
  auto one2 = pp_dropout::single(cfg, dir / "one2", pp_dropout::kMicro2);
  auto ppdp = pp_dropout::pipelined(4, cfg, " --set dist.pipeline_parallel=2", dir / "ppdp");  // dp = 4 / 2
  test::tp2d::check_same_losses(one2, ppdp, "pp 2 x dp 2");
}
