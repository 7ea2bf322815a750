// 2-D with sharding (issue 24): `trainer launch -n 4` of the tiny GPT with dist.tensor_parallel 2 and
// dist.sharding optimizer | gradients | full, so ZeRO-1/2/3 over the mesh's dp groups {0, 2} and {1, 3}
// with the TP slices as their parameters, logs the losses of one process at the same global batch
// (16) within 1e-6 relative for 10 AdamW steps with grad_clip (the norm above the clip: it acts), with
// grad_accum 2, sequence parallel, and odd widths cut into pieces that do not divide evenly over dp.
// The gradient norms equal one process's: a piece's squares are summed over dp, then a slice's over tp,
// a replicated parameter's once. Checkpoints hold the global tensors, written by rank 0 alone (no
// shard files): a (dp 2, tp 2, full) checkpoint holds the one-process run's names and shapes, and
// resumes in one process and at tp 2 without sharding; a one-process checkpoint resumes at (dp 2, tp 2,
// full); each continues the uninterrupted run.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "ckpt/ckpt_runs.hpp"
#include "io/safetensors.hpp"
#include "spawn.hpp"
#include "tp2d_runs.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace tp2dshard {  // named: the unity build joins the dist tests

using namespace test::tp2d;

// odd widths: n_embd 34 (heads of 17), a vocabulary of 33 (padded to 34 at tp 2), so a tp rank's
// c_attn bias has 51 elements; with 2 KiB buckets parameters straddle the dp ranks' chunks unevenly
const std::string kOdd = " --set model.n_embd=34 --set model.vocab_size=33 --set dist.bucket_mb=0.002";

test::TrainRun mesh_run(const std::string& cfg, const std::string& sharding, const std::string& extra,
                        const std::filesystem::path& out) {
  auto r = test::train_tiny_gpt("", k2d + cfg + kArgs + kTp2 + " --set dist.sharding=" + sharding + extra, out);
  require_trained(r, kSteps, 4);
  return r;
}

TEST_CASE("dp 2 x tp 2 with dist.sharding optimizer, gradients and full logs the losses of one process (also with "
          "grad_accum 2)",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp2d_shard");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto single = test::train_tiny_gpt("", "run " + cfg + kArgs + " --set train.batch_size=16", dir / "single");
  require_trained(single, kSteps, 1);

  auto z1 = mesh_run(cfg, "optimizer", " --set train.batch_size=8", dir / "z1");
  CHECK(z1.output.find("tensor parallel 2 (data parallel 2: sharded optimizer state (ZeRO-1))") != std::string::npos);
  check_same_losses(single, z1, "dp 2 x tp 2, sharding optimizer");
  check_same_grad_norms(dir / "single", dir / "z1", "sharding optimizer");

  auto z2 = mesh_run(cfg, "gradients", " --set train.batch_size=4", dir / "z2");
  CHECK(z2.output.find("(4 per micro-batch x 2 accumulation x 2 data-parallel ranks)") != std::string::npos);
  check_same_losses(single, z2, "dp 2 x tp 2, sharding gradients, grad_accum 2");
  check_same_grad_norms(dir / "single", dir / "z2", "sharding gradients, grad_accum 2");

  auto z3 = mesh_run(cfg, "full", " --set train.batch_size=8", dir / "z3");
  CHECK(z3.output.find("(ZeRO-3))") != std::string::npos);
  check_same_losses(single, z3, "dp 2 x tp 2, sharding full");
  check_same_grad_norms(dir / "single", dir / "z3", "sharding full");
  // a rank holds its dp half of its tp half of the optimizer state: about a quarter of one process's
  const auto one = test::records(dir / "single" / "tiny" / "metrics.jsonl", "train").back();
  const auto rec = test::records(dir / "z3" / "tiny" / "metrics.jsonl", "train").back();
  CHECK(rec.at("optim_state_bytes").get<int64_t>() < one.at("optim_state_bytes").get<int64_t>() / 3);

  auto z3a = mesh_run(cfg, "full", " --set train.batch_size=4", dir / "z3a");
  check_same_losses(single, z3a, "dp 2 x tp 2, sharding full, grad_accum 2");
}

TEST_CASE("dp 2 x tp 2 with dist.sharding: odd widths split unevenly over dp, and sequence parallel",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp2d_shard_odd");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto single = test::train_tiny_gpt("", "run " + cfg + kArgs + kOdd + " --set train.batch_size=16", dir / "single");
  require_trained(single, kSteps, 1);

  auto z2 = mesh_run(cfg, "gradients", kOdd + " --set train.batch_size=8", dir / "z2");
  check_same_losses(single, z2, "odd widths, sharding gradients");
  check_same_grad_norms(dir / "single", dir / "z2", "odd widths, sharding gradients");
  // the sequence-parallel partial gradients (LayerNorms, row biases) summed over tp on the dp pieces
  auto z3 = mesh_run(cfg, "full", kOdd + " --set dist.sequence_parallel=true --set train.batch_size=4", dir / "z3");
  check_same_losses(single, z3, "odd widths, sharding full, sequence parallel, grad_accum 2");
  check_same_grad_norms(dir / "single", dir / "z3", "odd widths, sharding full, sequence parallel");
}


TEST_CASE("dp 2 x tp 2 with dist.sharding full checkpoints the global tensors: they resume in one process, at tp 2 "
          "and from one process",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp2d_shard_resume");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string b8 = " --set train.batch_size=8", five = " --set train.max_steps=5";
  auto single = test::train_tiny_gpt("", "run " + cfg + kArgs + " --set train.batch_size=16", dir / "single");
  require_trained(single, kSteps, 1);
  auto one = test::train_tiny_gpt("", "run " + cfg + kArgs + b8 + five, dir / "one");
  require_trained(one, 5, 1);

  auto first = test::train_tiny_gpt("", k2d + cfg + kArgs + kTp2 + " --set dist.sharding=full" + b8 + five, dir / "full");
  require_trained(first, 5, 4);
  // each tp rank of dp 0 wrote its part of the model (its slices), every rank its dp pieces of its
  // part's optimizer state (no gather): they assemble into the one-process run's tensors (global
  // names and shapes)
  const auto step5 = dir / "full" / "tiny" / "checkpoints" / "step-5";
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(step5)) files.insert(e.path().filename().string());
  CHECK(files == std::set<std::string>{"manifest.json", "model-part0of2.safetensors", "model-part1of2.safetensors",
                                       "optimizer-part0of2-shard-0-of-2.safetensors",
                                       "optimizer-part0of2-shard-1-of-2.safetensors",
                                       "optimizer-part1of2-shard-0-of-2.safetensors",
                                       "optimizer-part1of2-shard-1-of-2.safetensors", "rng.safetensors", "state.json"});
  const auto one5 = dir / "one" / "tiny" / "checkpoints" / "step-5";
  check_same_tensors(one5, step5, "model", 1e-3);
  check_same_tensors(one5, step5, "optimizer", 1e-3);

  std::filesystem::copy(dir / "full", dir / "full_tp2", std::filesystem::copy_options::recursive);
  auto rest = test::train_tiny_gpt("", "run " + cfg + kArgs + b8 + " --resume auto", dir / "full");
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  REQUIRE(rest.losses.size() == kSteps);
  check_same_losses(single, rest, "(dp 2, tp 2, full) -> 1 process", 5);

  auto tp2 = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + kArgs + kTp2 + b8 + " --resume auto", dir / "full_tp2");
  INFO(tp2.output);
  REQUIRE(tp2.exit_code == 0);
  REQUIRE(tp2.losses.size() == kSteps);
  check_same_losses(single, tp2, "(dp 2, tp 2, full) -> (dp 1, tp 2, none)", 5);

  auto mesh = test::train_tiny_gpt("", k2d + cfg + kArgs + kTp2 + " --set dist.sharding=full" + b8 + " --resume auto",
                                   dir / "one");
  INFO(mesh.output);
  REQUIRE(mesh.exit_code == 0);
  REQUIRE(mesh.losses.size() == kSteps);
  check_same_losses(single, mesh, "1 process -> (dp 2, tp 2, full)", 5);
}

}  // namespace tp2dshard
