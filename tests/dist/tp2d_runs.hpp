// The 2-D end-to-end tests' common parts (test_tp2d_train.cpp, test_tp2d_shard.cpp): `trainer launch
// -n 4` of the tiny GPT at dp 2 x tp 2 against one process at the same global batch, and the checks
// of what rank 0 logged.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "ckpt/ckpt_runs.hpp"
#include "engine/parallel/sharded_checkpoint.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_parts.hpp"
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

// A small ViT on synthetic 8x8 images: 4 patches + the class token (a sequence of 5, which sequence
// parallel could not split over 2), 2 heads and mlp_dim 32 over tp 2.
inline constexpr const char* kTinyVitYaml = R"(run:
  name: tiny
  seed: 3
  deterministic: true
model:
  arch: vit
  in_channels: 1
  num_classes: 4
  image_size: 8
  patch_size: 4
  num_layers: 2
  num_heads: 2
  hidden_dim: 16
  mlp_dim: 32
data:
  format: synthetic
  workers: 1
  synthetic:
    num_samples: 1024
    val_samples: 32
    image_size: 8
train:
  batch_size: 8
  device: cpu
  threads: 1
  log_every: 1
optim:
  name: adamw
  lr: 0.01
dist:
  timeout_s: 60
log:
  progress: "off"
)";

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

// The tensors of one group of two checkpoints: the same names and shapes, values within `rel` of the larger
// magnitude of each tensor. The key block of c_attn.bias ([C, 2C) of q, k, v) is left out: its
// gradient is zero in exact arithmetic (a shift of every key by one vector leaves the softmax as it
// is), so AdamW steps each layout's rounding noise by about lr (measured 2.2e-4 of the tensor's
// largest magnitude after 5 steps). Other small-gradient elements do the same on a smaller scale
// (5.6e-5 at worst for the rest of the model, 1.4e-5 for the optimizer state, AVX2 EPYC), so the
// bound is 1e-3: what it checks is the layout (names, shapes, where each slice and piece lands; the
// losses check the arithmetic at 1e-6), and a misplaced slice differs by the weights' own size.
// `group` of the checkpoint folders `a` and `b`: one file, or a tensor-parallel run's parts assembled.
// One group's global tensors, whatever the layout wrote (the optimizer state: in the replicated
// layout, assembled from shards or part shards as a resume does).
inline std::map<std::string, torch::Tensor> group_tensors(const std::filesystem::path& dir, const std::string& group) {
  const auto all = group == "optimizer" ? engine::full_optimizer_state(io::load_checkpoint(dir), dir)
                                        : io::load_checkpoint_group(dir, group).tensors;
  return std::map<std::string, torch::Tensor>(all.begin(), all.end());
}

inline void check_same_tensors(const std::filesystem::path& a, const std::filesystem::path& b, const std::string& group,
                               double rel) {
  const auto ta = group_tensors(a, group), tb = group_tensors(b, group);
  std::set<std::string> na, nb;
  for (const auto& [k, v] : ta) na.insert(k);
  for (const auto& [k, v] : tb) nb.insert(k);
  REQUIRE(na == nb);
  double worst = 0;
  for (const auto& [k, t] : ta) {
    INFO(a.string() << " " << group << ": " << k);
    REQUIRE(t.sizes() == tb.at(k).sizes());
    auto x = t.to(torch::kFloat64), y = tb.at(k).to(torch::kFloat64);
    if (k.size() >= 16 && k.compare(k.size() - 16, 16, "attn.c_attn.bias") == 0) {
      const int64_t c = x.size(0) / 3;
      x = torch::cat({x.narrow(0, 0, c), x.narrow(0, 2 * c, c)});
      y = torch::cat({y.narrow(0, 0, c), y.narrow(0, 2 * c, c)});
    }
    const double scale = std::max(x.abs().max().item<double>(), 1e-30);
    const double d = (x - y).abs().max().item<double>() / scale;
    worst = std::max(worst, d);
    CHECK(d <= rel);
  }
  WARN(group << ": largest difference " << worst << " of a tensor's largest magnitude");
}

// One group ("model", or "optimizer" in the replicated layout, whatever shards or parts each
// checkpoint was written in) of two checkpoints bit for bit: the same names, shapes and bytes.
inline void check_identical_group(const std::filesystem::path& a, const std::filesystem::path& b,
                                  const std::string& group, const std::string& what) {
  const auto ta = group_tensors(a, group), tb = group_tensors(b, group);
  INFO(what << ": " << group);
  REQUIRE(!ta.empty());
  REQUIRE(ta.size() == tb.size());
  for (const auto& [name, t] : ta) {
    INFO(name);
    REQUIRE(tb.count(name) == 1);
    REQUIRE(t.sizes() == tb.at(name).sizes());
    CHECK(torch::equal(t, tb.at(name)));
  }
}
inline void check_identical_tensors(const std::filesystem::path& a, const std::filesystem::path& b, const std::string& what) {
  check_identical_group(a, b, "model", what);
}
inline void check_identical_optimizer_state(const std::filesystem::path& a, const std::filesystem::path& b,
                                            const std::string& what) {
  check_identical_group(a, b, "optimizer", what);
}

}  // namespace trainer::test::tp2d
