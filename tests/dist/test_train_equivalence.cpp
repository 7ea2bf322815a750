// Data parallelism changes nothing but speed: 2 ranks at batch B each (Gloo, loopback) log the same
// loss at every step as 1 process at batch 2B, with and without gradient accumulation. The loader
// gives rank r the r-th slice of each global batch, the logged loss is the mean over ranks, and the
// gradients are averaged over ranks, so the runs differ only in the order of floating-point sums.
#include <catch2/catch.hpp>

#include "spawn.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace {

constexpr size_t kSteps = 20;

void require_trained(const test::TrainRun& run, int64_t world) {
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.losses.size() == kSteps);
  CHECK(run.world_size == world);
  CHECK(run.losses.back() < run.losses.front() - 0.1);  // it learns
}

void check_same_losses(const test::TrainRun& a, const test::TrainRun& b) {
  const double diff = test::max_abs_diff(a.losses, b.losses);
  WARN("max |loss difference| over " << kSteps << " steps: " << diff << " (runs took " << a.seconds << " s and "
                                     << b.seconds << " s)");
  for (size_t i = 0; i < kSteps; ++i) {
    INFO("step " << i + 1);
    CHECK(a.losses[i] == Approx(b.losses[i]).margin(test::kLossTolerance).epsilon(0));
  }
}

// A small ViT on synthetic 8x8 images for the same comparison, run by the ViT case below. One patch
// per image, so that it learns the synthetic classes (a band of rows) within the 20 steps.
constexpr const char* kTinyVitYaml = R"(run:
  name: tiny
  seed: 3
  deterministic: true
model:
  arch: vit
  in_channels: 1
  num_classes: 4
  image_size: 8
  patch_size: 8
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
  max_steps: 20
  device: cpu
  threads: 1
  log_every: 1
optim:
  name: adamw
  lr: 0.01
  weight_decay: 0.0
dist:
  timeout_s: 60
log:
  progress: "off"
)";

}  // namespace

TEST_CASE("vit: 2 ranks with per-block activation checkpointing log the same losses as 1 process without", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("equiv_ddp_vit");
  test::write_file(dir / "tiny_vit.yaml", kTinyVitYaml);
  const auto cfg = (dir / "tiny_vit.yaml").string();
  auto single = test::train_tiny_gpt("", "run " + cfg + " --set train.batch_size=16", dir / "single");
  require_trained(single, 1);
  auto ddp = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg +
                                          " --set train.batch_size=8 --set model.activation_checkpointing=true",
                                  dir / "ddp");
  require_trained(ddp, 2);
  check_same_losses(single, ddp);
}

TEST_CASE("2 ranks at batch B log the same losses as 1 process at batch 2B for 20 steps", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("equiv_ddp");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto single = test::train_tiny_gpt("", "run " + cfg + " --set train.batch_size=16", dir / "single");
  require_trained(single, 1);
  auto ddp = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + " --set train.batch_size=8", dir / "ddp");
  require_trained(ddp, 2);
  check_same_losses(single, ddp);
}

TEST_CASE("2 ranks at batch B/2 with grad_accum 2 log the same losses as 1 process at batch 2B", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("equiv_ddp_accum");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto single = test::train_tiny_gpt("", "run " + cfg + " --set train.batch_size=16", dir / "single");
  require_trained(single, 1);
  auto ddp = test::train_tiny_gpt(
      "", "launch -n 2 -- run " + cfg + " --set train.batch_size=4 --set train.grad_accum=2", dir / "ddp");
  require_trained(ddp, 2);
  check_same_losses(single, ddp);
}

// Sized in epochs over a split that one global batch does not divide (72 samples, global batch 16:
// 4 steps an epoch, 8 samples dropped): 1 process accumulating 4 micro-batches of 4 and 2 ranks at 8
// run the same 20 steps on the same samples. An epoch is whole steps of the global batch in every
// layout; before, the accumulating process read 18 micro-batches an epoch and ran 23 steps, one of
// them across the epoch boundary, from step 5 on different samples.
TEST_CASE("sized in epochs over an uneven split: accumulation in 1 process and 2 ranks run the same steps", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("equiv_ddp_epochs");
  test::write_file(dir / "tiny_vit.yaml", kTinyVitYaml);
  const auto cfg = (dir / "tiny_vit.yaml").string() +
                   " --set train.max_steps=0 --set train.epochs=5 --set data.synthetic.num_samples=72";
  auto single = test::train_tiny_gpt("", "run " + cfg + " --set train.batch_size=4 --set train.grad_accum=4",
                                     dir / "single");
  require_trained(single, 1);
  auto ddp = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + " --set train.batch_size=8", dir / "ddp");
  require_trained(ddp, 2);
  check_same_losses(single, ddp);
}
