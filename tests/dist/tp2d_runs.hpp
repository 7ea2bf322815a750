// The 2-D end-to-end tests' common parts (test_tp2d_train.cpp, test_tp2d_shard.cpp): `trainer launch
// -n 4` of the tiny GPT at dp 2 x tp 2 against one process at the same global batch, and the checks
// of what rank 0 logged.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "ckpt/ckpt_runs.hpp"
#include "train_runs.hpp"

namespace trainer::test::tp2d {

inline constexpr size_t kSteps = 10;
inline constexpr double kRel = 1e-6;
// the global batch 16 in every run: one process at 16, or 8 (or 4 x accumulation 2) on each of 2 dp
// ranks; the gradient norm above grad_clip, so clipping acts
inline const std::string kArgs = " --set train.max_steps=10 --set train.grad_clip=0.5 --set optim.weight_decay=0.1"
                                 " --set train.global_batch_size=16";
inline const std::string k2d = "launch -n 4 -- run ";
inline const std::string kTp2 = " --set dist.tensor_parallel=2";

inline void require_trained(const TrainRun& run, size_t steps, int64_t world) {
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.losses.size() == steps);
  CHECK(run.world_size == world);
}

// The steps [from, kSteps) within kRel of the reference; the largest relative difference is reported.
inline void check_same_losses(const TrainRun& ref, const TrainRun& b, const char* what, size_t from = 0) {
  double worst = 0;
  for (size_t i = from; i < kSteps; ++i) {
    INFO(what << ", step " << i + 1 << ": " << ref.losses[i] << " vs " << b.losses[i]);
    const double rel = std::abs(ref.losses[i] - b.losses[i]) / std::abs(ref.losses[i]);
    worst = std::max(worst, rel);
    CHECK(rel <= kRel);
  }
  WARN(what << ": largest relative loss difference " << worst << " over steps " << from + 1 << "-" << kSteps << " ("
            << b.seconds << " s)");
}

// The gradient norm each step logged (before clipping): the mesh's counts every replicated parameter
// once (and a dp piece's squares once), so it is the one-process norm; the first above train.grad_clip.
inline void check_same_grad_norms(const std::filesystem::path& ref, const std::filesystem::path& b,
                                  const char* what = "") {
  auto r1 = records(ref / "tiny" / "metrics.jsonl", "train");
  auto r2 = records(b / "tiny" / "metrics.jsonl", "train");
  REQUIRE(r1.size() == r2.size());
  CHECK(r1.front().at("grad_norm").get<double>() > 0.5);
  double worst = 0;
  for (size_t i = 0; i < r1.size(); ++i) {
    const double n1 = r1[i].at("grad_norm"), n2 = r2[i].at("grad_norm");
    INFO(what << ", step " << i + 1 << ": grad_norm " << n1 << " vs " << n2);
    worst = std::max(worst, std::abs(n1 - n2) / n1);
    CHECK(std::abs(n1 - n2) <= 1e-5 * n1);
  }
  WARN(what << ": largest relative grad_norm difference " << worst);
}

}  // namespace trainer::test::tp2d
