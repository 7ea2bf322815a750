// `trainer eval`: the metrics of a checkpoint equal the eval record its run logged at that step.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "../ckpt/ckpt_runs.hpp"
#include "engine/commands/inference.hpp"
#include "inference_runs.hpp"
#include "test_util.hpp"

using namespace trainer::test;
namespace fs = std::filesystem;

namespace {

// A ResNet on synthetic images, channels-last, evaluated and checkpointed at steps 10 and 20.
std::string eval_resnet_config() {
  return "run: {name: ev, out_dir: runs, seed: 1}\n"
         "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 1, num_classes: 4, channels_last: true}\n"
         "data: {format: synthetic, workers: 1, synthetic: {num_samples: 256, val_samples: 72, image_size: 16}}\n"
         "train: {batch_size: 32, max_steps: 20, log_every: 5, eval_every: 10, threads: 1}\n"
         "optim: {name: sgd, lr: 0.05}\nlog: {progress: off}\ncheckpoint: {every_steps: 10, keep_last: 5}\n";
}

// A GPT on synthetic tokens in bf16 with model.attention auto (resolved by the run at its start).
std::string eval_gpt_config() {
  return "run: {name: evg, out_dir: runs, seed: 2}\n"
         "model: {arch: gpt, vocab_size: 64, block_size: 16, n_layer: 2, n_head: 2, n_embd: 32, dropout: 0.1}\n"
         // token data reports bits per byte only with the bytes behind a token (data.bytes_per_token)
         "data: {format: synthetic, workers: 1, bytes_per_token: 3.5, synthetic: {num_samples: 96, val_samples: 40}}\n"
         "train: {batch_size: 8, max_steps: 8, log_every: 4, eval_every: 4, threads: 1, precision: bf16}\n"
         "optim: {name: adamw, lr: 0.003}\nlog: {progress: off}\ncheckpoint: {every_steps: 4, keep_last: 5}\n";
}

// The JSON record `trainer eval` printed (its last JSON line); fails the test when there is none.
nlohmann::json eval_record(const fs::path& dir, const std::string& checkpoint, const std::string& extra = "") {
  auto r = run_trainer("eval " + (dir / "exp.yaml").string() + " --checkpoint " + checkpoint + extra);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto lines = json_lines(r.output);
  REQUIRE(lines.size() == 1);
  return lines.back();
}

// Every figure of the logged record equals the one eval printed, bit for bit.
void check_same_metrics(const nlohmann::json& logged, const nlohmann::json& got) {
  INFO("logged " << logged.dump() << "\neval   " << got.dump());
  CHECK(got.at("count") == logged.at("count"));
  CHECK(got.at("loss").get<double>() == logged.at("loss").get<double>());
  for (const char* k : {"accuracy", "top5", "ppl", "bpb"}) {
    CHECK(got.contains(k) == logged.contains(k));
    if (logged.contains(k)) CHECK(got.at(k).get<double>() == logged.at(k).get<double>());
  }
}

}  // namespace

TEST_CASE("eval of each checkpoint reproduces the eval record logged at its step (resnet, channels-last)", "[e2e]") {
  auto dir = scratch_dir("eval_resnet");
  train_config(dir, eval_resnet_config());
  const auto run = dir / "runs" / "ev";
  const auto logged = records(run / "metrics.jsonl", "eval");
  REQUIRE(logged.size() == 2);
  for (const auto& rec : logged) {
    const int64_t step = rec.at("step").get<int64_t>();
    auto got = eval_record(dir, (run / "checkpoints" / ("step-" + std::to_string(step))).string());
    CHECK(got.at("step") == step);
    CHECK(got.at("count") == 72);
    check_same_metrics(rec, got);
  }
  // the run directory and the checkpoints folder mean their newest checkpoint
  CHECK(eval_record(dir, run.string()).at("step") == 20);
  CHECK(eval_record(dir, (run / "checkpoints").string()).at("step") == 20);
  // an exported fp32 file holds the same weights
  auto ex = run_trainer("export " + (run / "checkpoints" / "step-20").string() + " --out " + (dir / "m.safetensors").string());
  REQUIRE(ex.exit_code == 0);
  auto exported = eval_record(dir, (dir / "m.safetensors").string());
  CHECK(exported.at("step") == 20);
  check_same_metrics(logged.back(), exported);
  // --output: the record into a file, the human line still on the console
  auto r = run_trainer("eval " + (dir / "exp.yaml").string() + " --checkpoint " + run.string() + " --output " +
                       (dir / "eval.json").string());
  REQUIRE(r.exit_code == 0);
  CHECK(json_lines(r.output).empty());
  CHECK(r.output.find("eval " + (run / "checkpoints" / "step-20").string() + " (step 20): loss ") != std::string::npos);
  check_same_metrics(logged.back(), nlohmann::json::parse(read_file(dir / "eval.json")));
  // a config with another layout than the run's scores in it (rounding apart), and says so, for a
  // checkpoint and an export alike
  for (const auto& weights : {run.string(), (dir / "m.safetensors").string()}) {
    auto other = run_trainer("eval " + (dir / "exp.yaml").string() + " --checkpoint " + weights +
                             " --set model.channels_last=false");
    INFO(other.output);
    REQUIRE(other.exit_code == 0);
    CHECK(other.output.find("was trained with model.channels_last true; the config's false is used") != std::string::npos);
  }
  CHECK(r.output.find("was trained with model.channels_last") == std::string::npos);
}

TEST_CASE("eval of a bf16 GPT checkpoint reproduces its logged loss and bits per byte", "[e2e]") {
  auto dir = scratch_dir("eval_gpt");
  train_config(dir, eval_gpt_config());
  const auto run = dir / "runs" / "evg";
  const auto logged = records(run / "metrics.jsonl", "eval");
  REQUIRE(logged.size() == 2);
  for (const auto& rec : logged) {
    const int64_t step = rec.at("step").get<int64_t>();
    auto got = eval_record(dir, (run / "checkpoints" / ("step-" + std::to_string(step))).string());
    REQUIRE(got.contains("bpb"));
    check_same_metrics(rec, got);
  }
}

TEST_CASE("eval under trainer launch: every rank scores its shard, rank 0 prints the merged record", "[e2e][dist]") {
  auto dir = scratch_dir("eval_launch");
  train_config(dir, eval_resnet_config());
  const auto run = dir / "runs" / "ev";
  const auto logged = records(run / "metrics.jsonl", "eval").back();
  auto r = run_trainer("launch -n 2 -- eval " + (dir / "exp.yaml").string() + " --checkpoint " + run.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto lines = json_lines(r.output);
  REQUIRE(lines.size() == 1);  // rank 1 prints nothing
  CHECK(lines[0].at("count") == logged.at("count"));  // 36 + 36: the shards cover the split once
  // two shards summed in another order: equal up to rounding
  CHECK(lines[0].at("loss").get<double>() == Approx(logged.at("loss").get<double>()).epsilon(1e-6));
  CHECK(lines[0].at("accuracy").get<double>() == Approx(logged.at("accuracy").get<double>()).epsilon(1e-9));
}

TEST_CASE("train.eval_steps counts batches over all ranks: 1 and 2 ranks score the same samples", "[e2e][dist]") {
  auto dir = scratch_dir("eval_steps_global");
  train_config(dir, eval_resnet_config());
  const auto run = dir / "runs" / "ev";
  const std::string args = (dir / "exp.yaml").string() + " --checkpoint " + run.string() + " --set train.eval_steps=1";
  auto one = run_trainer("eval " + args);
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  auto two = run_trainer("launch -n 2 -- eval " + args);
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  const auto a = json_lines(one.output).back(), b = json_lines(two.output).back();
  CHECK(a.at("count") == 32);  // one batch of train.batch_size, the first 32 samples of the split
  CHECK(b.at("count") == 32);  // 16 + 16 on two ranks, not 32 each
  CHECK(b.at("loss").get<double>() == Approx(a.at("loss").get<double>()).epsilon(1e-6));
  CHECK(b.at("accuracy").get<double>() == Approx(a.at("accuracy").get<double>()).epsilon(1e-9));
}

TEST_CASE("eval refuses a missing, corrupt or mismatched checkpoint with a message naming it", "[e2e]") {
  auto dir = scratch_dir("eval_errors");
  train_config(dir, eval_resnet_config());
  const auto run = dir / "runs" / "ev";
  const std::string cfg = (dir / "exp.yaml").string();

  auto missing = run_trainer("eval " + cfg + " --checkpoint " + (dir / "nothere").string());
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("--checkpoint " + (dir / "nothere").string() + ": no such checkpoint") != std::string::npos);
  // --output in a folder that is not there: said before the evaluation, not after it
  auto nowhere = run_trainer("eval " + cfg + " --checkpoint " + run.string() + " --output " +
                             (dir / "nofolder/r.json").string());
  CHECK(nowhere.exit_code == 2);
  CHECK(nowhere.output.find("--output " + (dir / "nofolder/r.json").string() + ": its folder " +
                            (dir / "nofolder").string() + " does not exist") != std::string::npos);
  CHECK(nowhere.output.find("eval ") == std::string::npos);  // no evaluation ran

  auto wider = run_trainer("eval " + cfg + " --set model.width=1.0 --checkpoint " + run.string());
  CHECK(wider.exit_code == 1);
  CHECK(wider.output.find((run / "checkpoints" / "step-20" / "model.safetensors").string()) != std::string::npos);
  CHECK(wider.output.find("conv1.weight") != std::string::npos);
  CHECK(wider.output.find("shape") != std::string::npos);

  write_file(dir / "gpt.yaml", eval_gpt_config());
  auto other = run_trainer("eval " + (dir / "gpt.yaml").string() + " --checkpoint " + run.string());
  CHECK(other.exit_code == 1);
  CHECK(other.output.find("holds a model.arch resnet model; the config's model.arch is gpt") != std::string::npos);

  // one flipped byte in the newest checkpoint: a named step is refused, the folder falls back to step-10
  const auto weights = run / "checkpoints" / "step-20" / "model.safetensors";
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-3, std::ios::end);
    const char b = static_cast<char>(f.get() ^ 0xFF);
    f.seekp(-3, std::ios::end);
    f.put(b);
  }
  auto corrupt = run_trainer("eval " + cfg + " --checkpoint " + (run / "checkpoints" / "step-20").string());
  CHECK(corrupt.exit_code == 1);
  CHECK(corrupt.output.find(weights.string()) != std::string::npos);
  CHECK(eval_record(dir, run.string()).at("step") == 10);
  fs::create_directories(run / "checkpoints" / "step-30");  // a save that never completed
  auto incomplete = run_trainer("eval " + cfg + " --checkpoint " + (run / "checkpoints" / "step-30").string());
  CHECK(incomplete.exit_code == 1);
  CHECK(incomplete.output.find("step-30: incomplete checkpoint: no manifest.json") != std::string::npos);

  write_file(dir / "junk.safetensors", "not a safetensors file");
  auto junk = run_trainer("eval " + cfg + " --checkpoint " + (dir / "junk.safetensors").string());
  CHECK(junk.exit_code == 1);
  CHECK(junk.output.find((dir / "junk.safetensors").string()) != std::string::npos);
}

// A run directory's own checkpoints/ comes before the folders its attempts recorded: a copy of a run
// directory (its metrics.jsonl naming the original's folder) was evaluated on the original's newest
// checkpoint, in silence (found from outside, 2026-12-07). The recorded folder serves a run whose
// checkpoints/ holds none.
TEST_CASE("run_checkpoint_folder: the run's own checkpoints before the folder its attempts recorded", "[unit]") {
  auto dir = scratch_dir("run_checkpoint_folder");
  const auto run = dir / "copy", elsewhere = dir / "original_checkpoints";
  fs::create_directories(elsewhere / "step-15");
  fs::create_directories(run / "checkpoints");
  write_file(run / "metrics.jsonl", "{\"kind\":\"attempt\",\"attempt\":1,\"checkpoint_dir\":\"" + elsewhere.string() + "\"}\n");
  CHECK(trainer::engine::run_checkpoint_folder(run) == elsewhere);  // its own holds none
  fs::create_directories(run / "checkpoints" / "step-10");
  CHECK(trainer::engine::run_checkpoint_folder(run) == run / "checkpoints");
}
