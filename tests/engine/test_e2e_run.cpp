// End to end through the real `trainer run` binary on synthetic data.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

#include "test_util.hpp"

using trainer::test::run_trainer;
using trainer::test::scratch_dir;
using trainer::test::write_file;

namespace {

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::istringstream in(trainer::test::read_file(p));
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<nlohmann::json> of_kind(const std::vector<nlohmann::json>& recs, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& r : recs)
    if (r.at("kind") == kind) out.push_back(r);
  return out;
}

const char* kTinyGpt = R"(run: {name: tiny_gpt, seed: 0}
model: {arch: gpt, vocab_size: 32, block_size: 16, n_layer: 1, n_head: 2, n_embd: 32}
data: {format: synthetic, workers: 1, synthetic: {num_samples: 512, val_samples: 64}}
train: {batch_size: 16, max_steps: 40, log_every: 5, eval_every: 20, device: cpu, threads: 1}
optim: {name: adamw, lr: 0.01, weight_decay: 0.01}
schedule: {name: cosine, warmup_steps: 5, min_lr_ratio: 0.1}
log: {progress: off}
)";

// One 16x16 patch: synthetic images put their class in a band of rows, which a single patch token
// separates within a few dozen steps (smaller patches need hundreds: a ViT has no locality prior).
const char* kTinyVit = R"(run: {name: tiny_vit, seed: 0}
model: {arch: vit, in_channels: 3, num_classes: 4, image_size: 16, patch_size: 16, num_layers: 2, num_heads: 2,
        hidden_dim: 32, mlp_dim: 64, activation_checkpointing: true}
data: {format: synthetic, workers: 1, synthetic: {num_samples: 512, val_samples: 128, image_size: 16}}
train: {batch_size: 16, max_steps: 60, log_every: 10, eval_every: 0, device: cpu, threads: 1, precision: bf16}
optim: {name: adamw, lr: 0.003, weight_decay: 0.01}
log: {progress: off}
)";

}  // namespace

TEST_CASE("trainer run trains a ViT in bf16 with activation checkpointing: loss down, accuracy far above chance", "[e2e]") {
  auto dir = scratch_dir("e2e_vit");
  write_file(dir / "tiny.yaml", kTinyVit);
  auto r = run_trainer("run " + (dir / "tiny.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto recs = read_jsonl(dir / "runs/tiny_vit/metrics.jsonl");
  auto train = of_kind(recs, "train"), eval = of_kind(recs, "eval");
  REQUIRE(train.size() == 6);
  REQUIRE(eval.size() == 1);
  CHECK(train.back().at("loss").get<double>() < train.front().at("loss").get<double>() - 0.3);
  CHECK(eval[0].at("accuracy").get<double>() > 0.6);  // 4 classes: chance is 0.25
  CHECK(r.output.find("model vit:") != std::string::npos);
}

TEST_CASE("trainer run on a tiny synthetic GPT reduces the loss and writes metrics.jsonl", "[e2e]") {
  auto dir = scratch_dir("e2e_gpt");
  write_file(dir / "tiny.yaml", kTinyGpt);
  auto r = run_trainer("run " + (dir / "tiny.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto recs = read_jsonl(dir / "runs/tiny_gpt/metrics.jsonl");
  auto train = of_kind(recs, "train"), eval = of_kind(recs, "eval"), summary = of_kind(recs, "summary");
  REQUIRE(train.size() == 8);  // steps 5, 10, ..., 40
  CHECK(train.front().at("step") == 5);
  CHECK(train.back().at("step") == 40);
  REQUIRE(eval.size() == 2);   // step 20 and the end
  CHECK(eval[0].at("step") == 20);
  CHECK(eval[1].at("step") == 40);
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].at("steps") == 40);
  CHECK(summary[0].at("samples") == 40 * 16);
  CHECK(summary[0].at("stop_reason") == "max_steps");
  // a uniform guess over 32 tokens scores ln 32 = 3.47 nats; the sequences are predictable
  const double uniform = std::log(32.0);
  CHECK(train.back().at("loss").get<double>() < train.front().at("loss").get<double>() - 0.5);
  CHECK(eval[1].at("loss").get<double>() < uniform - 1.0);
  // synthetic tokens are no bytes of text: perplexity, and no bits per byte (data.bytes_per_token unset)
  CHECK(eval[1].at("ppl").get<double>() == Approx(std::exp(eval[1].at("loss").get<double>())));
  CHECK_FALSE(eval[1].contains("bpb"));
  // the learning rate follows the schedule: warmup over 5 steps, so step 5 used the full rate
  CHECK(train.front().at("lr").get<double>() == Approx(0.01));
  CHECK(r.output.find("done: 40 steps") != std::string::npos);
  // the end says where the results are and what comes next (found from outside: nothing did)
  CHECK(r.output.find("results in ") != std::string::npos);
  CHECK(r.output.find("`trainer report ") != std::string::npos);
  CHECK(r.output.find(" --out model.safetensors` writes the weights for PyTorch") != std::string::npos);
}

TEST_CASE("early stopping ends a run whose metric cannot improve", "[e2e]") {
  auto dir = scratch_dir("e2e_early_stop");
  // lr 0: the validation loss stays exactly the same, so every evaluation after the first fails to improve
  write_file(dir / "tiny.yaml", R"(run: {name: stop, seed: 0}
model: {arch: gpt, vocab_size: 32, block_size: 16, n_layer: 1, n_head: 2, n_embd: 32}
data: {format: synthetic, workers: 1, synthetic: {num_samples: 256, val_samples: 32}}
train: {batch_size: 8, max_steps: 100, log_every: 5, eval_every: 5, eval_steps: 2, device: cpu, threads: 1,
        early_stopping: {metric: loss, patience: 2}}
optim: {name: sgd, lr: 0.0, momentum: 0.0}
log: {progress: off}
)");
  auto r = run_trainer("run " + (dir / "tiny.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto recs = read_jsonl(dir / "runs/stop/metrics.jsonl");
  auto eval = of_kind(recs, "eval");
  REQUIRE(eval.size() == 3);  // step 5 sets the best, 10 and 15 do not improve: stop
  CHECK(eval[2].at("step") == 15);
  CHECK(eval[2].at("best_step") == 5);
  auto summary = of_kind(recs, "summary");
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].at("stop_reason") == "early_stopping");
  CHECK(summary[0].at("steps") == 15);
  CHECK(summary[0].at("best_step") == 5);
}
