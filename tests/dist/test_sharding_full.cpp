// dist.sharding full (ZeRO-3) beyond the loss equivalence of test_sharding.cpp (whose check_modes
// runs full next to optimizer and gradients): what a rank holds between units, checkpoints across
// world sizes and layouts, frozen parameters. The Python side of its export: tests/python/test_export_full.py.
#include <catch2/catch.hpp>

#include <cstdio>

#include "dist/shard_runs.hpp"
#include "skip.hpp"

using namespace trainer;
using namespace trainer::shard_test;

namespace fs = std::filesystem;

TEST_CASE("sharding full: at 4 ranks a rank holds a quarter of the parameters, gradients and optimizer state",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_full_memory");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  std::map<std::string, nlohmann::json> rec;
  for (const std::string mode : {"none", "full"}) {
    auto r = shard_trainer("launch -n 4 -- run " + cfg + " --set train.max_steps=2 --set dist.sharding=" + mode +
                           " --out-dir " + (dir / mode).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    for (const auto& j : test::records(dir / mode / "tiny/metrics.jsonl", "train")) rec[mode] = j;
    REQUIRE(rec.count(mode));
  }
  const auto bytes = [&](const std::string& mode, const char* key) { return rec[mode].at(key).get<double>(); };
  const double params = bytes("none", "param_bytes");
  // none's grad_bytes counts the gradients and DDP's bucket copy of them (2 x params): the model's
  // state is its parameters, one gradient per parameter and the optimizer state
  const double none_state = params + params + bytes("none", "optim_state_bytes");
  const double full_state =
      bytes("full", "param_bytes") + bytes("full", "grad_bytes") + bytes("full", "optim_state_bytes");
  WARN("rank 0 bytes (params / grads / optimizer): none " << params << " / " << bytes("none", "grad_bytes") << " / "
       << bytes("none", "optim_state_bytes") << "; full " << bytes("full", "param_bytes") << " / "
       << bytes("full", "grad_bytes") << " / " << bytes("full", "optim_state_bytes") << "; full / none state "
       << full_state / none_state);
  CHECK(bytes("none", "grad_bytes") == 2 * params);
  // the records are taken after backward, when every unit is freed: only the rank's chunks remain
  CHECK(full_state >= none_state / 4);
  CHECK(full_state <= none_state / 4 * 1.1);
  for (const char* key : {"param_bytes", "grad_bytes"}) {
    INFO(key);
    CHECK(bytes("full", key) >= params / 4);
    CHECK(bytes("full", key) <= params / 4 * 1.1);
  }
  CHECK(bytes("full", "optim_state_bytes") <= bytes("none", "optim_state_bytes") / 4 * 1.1);
}

TEST_CASE("sharding full: a 4-rank checkpoint resumes on 2 fully sharded ranks and on 1 process", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_full_ckpt_4");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto saved = saved_run(dir, cfg, 4, "full", "saved");
  const auto step6 = saved / "checkpoints/step-6";
  for (int r = 0; r < 4; ++r)  // every rank wrote its own shard; rank 0 the whole model
    CHECK(fs::exists(step6 / ("optimizer-shard-" + std::to_string(r) + "-of-4.safetensors")));
  CHECK(fs::exists(step6 / "model.safetensors"));
  CHECK_FALSE(fs::exists(step6 / "optimizer.safetensors"));
  check_resumed(dir, cfg, saved, 2, "full", "on2");
  check_resumed(dir, cfg, saved, 1, "none", "on1");
}

TEST_CASE("sharding full: a replicated 2-rank checkpoint resumes fully sharded on 4 ranks", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_full_ckpt_from_ddp");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto saved = saved_run(dir, cfg, 2, "none", "saved");
  CHECK(fs::exists(saved / "checkpoints/step-6/optimizer.safetensors"));
  check_resumed(dir, cfg, saved, 4, "full", "on4");
}

TEST_CASE("sharding full: frozen parameters stay replicated and the run logs the losses of none at 2 ranks",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_full_freeze");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  // the position embedding (half of the embeddings unit) and the whole first block frozen: a unit
  // with no trainable parameter has no bucket, a partly frozen one shards its trainable part only
  const std::string freeze = " --set 'train.freeze=[^transformer.wpe, ^transformer.h.0.]'";
  auto none = shard_run(dir, cfg, 2, "none", freeze);
  auto full = shard_run(dir, cfg, 2, "full", freeze);
  CHECK(full.output.find("ZeRO-3") != std::string::npos);
  check_same_as_none(none, full, "full at 2 ranks with train.freeze");
}

TEST_CASE("sharding full: a 6-layer GPT gathers its units one at a time (plus the prefetched one and the tied "
          "embeddings), also with grad_accum 2",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_full_peak");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  for (const std::string accum : {"1", "2"}) {
    auto r = shard_trainer("launch -n 2 -- run " + cfg + " --set model.n_layer=6 --set train.max_steps=2"
                           " --set train.batch_size=4 --set train.grad_accum=" + accum +
                           " --set dist.sharding=full --out-dir " + (dir / accum).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string key = "the first step gathered at most ";
    const auto at = r.output.find(key);
    REQUIRE(at != std::string::npos);
    long units = 0, total = 0, bytes = 0, all = 0, largest = 0;
    REQUIRE(std::sscanf(r.output.c_str() + at + key.size(),
                        "%ld of %ld units at once, %ld bytes of the model's %ld (largest unit %ld bytes)", &units,
                        &total, &bytes, &all, &largest) == 5);
    WARN("grad_accum " << accum << ": at most " << units << " of " << total << " units, " << bytes << " of " << all
                       << " bytes gathered at once (largest unit " << largest << ")");
    CHECK(total == 8);  // embeddings, 6 blocks, head
    // the embeddings (wte is lm_head too: gathered from the first forward to the end of backward),
    // the running block and the prefetched one
    CHECK(units <= 3);
    CHECK(bytes <= 3 * largest);
    CHECK(bytes < all / 2);
  }
}

// Every rank must run as many forwards as the others (each forward's all-gathers pair up across
// ranks): a validation split that does not divide gives some ranks an empty last batch, still a
// forward. 33 windows at 2 ranks of 8: the last global batch is one sample.
TEST_CASE("sharding full: evaluation over a split that does not divide by the ranks gives none's figures",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_full_eval");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  std::map<std::string, std::vector<double>> evals;
  for (const std::string mode : {"none", "full"}) {
    auto r = shard_trainer("launch -n 2 -- run " + cfg + " --set train.max_steps=4 --set train.eval_every=2"
                           " --set data.synthetic.val_samples=33 --set dist.sharding=" + mode + " --out-dir " +
                           (dir / mode).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    for (const auto& j : test::records(dir / mode / "tiny/metrics.jsonl", "eval")) evals[mode].push_back(j.at("loss"));
  }
  REQUIRE(evals["none"].size() == 2);
  REQUIRE(evals["full"].size() == 2);
  for (size_t i = 0; i < 2; ++i) CHECK(std::abs(evals["full"][i] - evals["none"][i]) <= 1e-6 * evals["none"][i]);
}

// train.ema reads the whole live weights at each update: under full it gathers them for it.
TEST_CASE("sharding full: train.ema gives none's EMA figures at 2 ranks, and its checkpoint resumes", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_full_ema");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string ema =
      " --set train.ema.decay=0.9 --set train.ema.every=2 --set train.ema.eval=true --set train.eval_every=6";
  std::map<std::string, std::vector<double>> evals;
  for (const std::string mode : {"none", "full"}) {
    auto r = shard_trainer("launch -n 2 -- run " + cfg + ema + kShardCkptArgs + " --set dist.sharding=" + mode +
                           " --out-dir " + (dir / mode).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    for (const auto& j : test::records(dir / mode / "tiny/metrics.jsonl", "eval")) evals[mode].push_back(j.at("ema_loss"));
  }
  REQUIRE(evals["none"].size() == 2);  // steps 6 and 12
  REQUIRE(evals["full"].size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("eval " << i << ": none " << evals["none"][i] << ", full " << evals["full"][i]);
    CHECK(std::abs(evals["full"][i] - evals["none"][i]) <= 1e-6 * evals["none"][i]);
  }
  // the step-6 checkpoint (with its EMA weights) resumes under full on 4 ranks: the same losses
  check_resumed(dir, cfg + ema, dir / "full" / "tiny", 4, "full", "ema_on4");
}

// train.ema.lookahead writes the average back into the weights: under optimizer the ranks' flat
// buffers, under full each rank's chunks (taken from the gathered whole). Every 5 of 12 steps, the last
// one too.
TEST_CASE("sharding: train.ema.lookahead at 2 ranks gives one process's losses, under none, optimizer and full",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_lookahead");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string la = " --set train.ema.decay=0.9 --set train.ema.every=5 --set train.ema.lookahead=true";
  std::map<std::string, std::vector<double>> losses;
  for (const std::string mode : {"one", "plain", "none", "optimizer", "full"}) {
    const std::string args = (mode == "plain" ? "" : la) + kShardCkptArgs;
    const int world = mode == "one" || mode == "plain" ? 1 : 2;
    auto r = shard_trainer(shard_launch(world, mode, cfg) + args +
                           " --out-dir " + (dir / mode).string());
    INFO(mode << ": " << r.output);
    REQUIRE(r.exit_code == 0);
    for (const auto& j : test::records(dir / mode / "tiny/metrics.jsonl", "train")) losses[mode].push_back(j.at("loss"));
    REQUIRE(losses[mode].size() == 12);
  }
  for (int i = 0; i < 5; ++i) CHECK(losses["one"][i] == losses["plain"][i]);  // the first update follows step 5
  CHECK(losses["one"][5] != losses["plain"][5]);
  for (const std::string mode : {"none", "optimizer", "full"})
    for (size_t i = 0; i < 12; ++i) {
      INFO(mode << " step " << i + 1);
      CHECK(std::abs(losses[mode][i] - losses["one"][i]) <= 1e-5 * losses["one"][i]);
    }
}
