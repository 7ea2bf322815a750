// train.batch_size auto on 2 ranks: both ranks take the same micro-batch, accumulation keeps the
// global batch, and the losses equal those of the same global batch without accumulation.
#include <catch2/catch.hpp>

#include "ckpt/ckpt_runs.hpp"
#include "engine/memory_runs.hpp"
#include "train_runs.hpp"

using namespace trainer;

TEST_CASE("batch_size auto on 2 ranks: one micro-batch for both, global batch kept, same losses", "[dist][e2e]") {
  auto dir = test::scratch_dir("auto_batch_dist");
  const auto cfg = test::auto_config(dir);
  const auto check = test::check_memory(cfg);
  INFO(check.output);
  REQUIRE(check.exit_code == 0);
  const double params = check.parameters, fixed = check.held(), constant = check.step_constant;
  const double per_sample = check.per_sample;
  REQUIRE(per_sample > 0);
  // 2 ranks add the DDP buckets (one copy of the gradients); room for 2.5 samples: of the divisors
  // of 8 samples per rank, micro-batch 2 fits and 4 does not
  const double budget_gb = (fixed + params + constant + 2.5 * per_sample) / 1e9;
  auto run = test::run_trainer("launch -n 2 -- run " + cfg + " --set train.memory_budget_gb=" +
                               std::to_string(budget_gb) + " --out-dir " + (dir / "auto").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("train.batch_size auto: micro-batch 2 x 4 accumulation x 2 rank(s) = global batch 16") !=
        std::string::npos);
  // rank 1 logs to its own file: the same choice there
  CHECK(test::read_file(dir / "auto/auto/logs/rank1.log").find("micro-batch 2 x 4 accumulation") != std::string::npos);
  // resumed on 2 ranks: rank 0 reads the kept choice and hands it to rank 1
  auto resumed = test::run_trainer("launch -n 2 -- run " + cfg + " --set train.memory_budget_gb=" +
                                   std::to_string(budget_gb) + " --set train.max_steps=6 --out-dir " +
                                   (dir / "auto").string());
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("micro-batch 2 x 4 accumulation x 2 rank(s) = global batch 16 (kept from") !=
        std::string::npos);
  const auto rank1 = test::read_file(dir / "auto/auto/logs/rank1.log");
  CHECK(rank1.find("micro-batch 2 x 4 accumulation x 2 rank(s) = global batch 16 (kept from") != std::string::npos);

  auto fixed_run = test::run_trainer("launch -n 2 -- run " + cfg + " --set train.batch_size=8 --out-dir " +
                                     (dir / "fixed").string());
  INFO(fixed_run.output);
  REQUIRE(fixed_run.exit_code == 0);
  auto a = test::train_losses(dir / "auto/auto/metrics.jsonl");
  auto b = test::train_losses(dir / "fixed/auto/metrics.jsonl");
  REQUIRE(a.size() == 6);  // 4 + the 2 resumed steps
  REQUIRE(b.size() == 4);
  for (int64_t s = 1; s <= 4; ++s) {
    INFO("step " << s << ": micro-batch 2 x 4 " << a.at(s) << ", micro-batch 8 " << b.at(s));
    CHECK(a.at(s) == Approx(b.at(s)).margin(test::kLossTolerance).epsilon(0));
  }
}
