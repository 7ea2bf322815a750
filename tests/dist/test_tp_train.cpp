// Tensor parallel end to end: `trainer launch -n 2` of the tiny GPT with dist.tensor_parallel 2
// (fp32, AdamW, grad_clip) logs the losses of the 1-process run within 1e-6 relative for 10 steps,
// with and without sequence parallel; a tp-2 checkpoint resumes in one process and continues as the
// uninterrupted run; `trainer run` with a T that does not fit the world exits 2 naming the key; with
// dropout, activation checkpointing and a resume repeat the tp ranks' region masks (region_rng.hpp).
#include <catch2/catch.hpp>

#include "ckpt/ckpt_runs.hpp"
#include "spawn.hpp"
#include "tp2d_runs.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace tp_train {  // named: the unity build joins the dist tests

constexpr size_t kTpSteps = 10;
constexpr double kTpRel = 1e-6;
const std::string kTpArgs = " --set train.max_steps=10 --set train.grad_clip=0.5 --set optim.weight_decay=0.1";


void tp_require_trained(const test::TrainRun& run, size_t steps, int64_t world) {
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.losses.size() == steps);
  CHECK(run.world_size == world);
}

void tp_check_same_losses(const test::TrainRun& a, const test::TrainRun& b, size_t from = 0) {
  for (size_t i = from; i < kTpSteps; ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(a.losses[i] - b.losses[i]) <= kTpRel * std::abs(a.losses[i]));
  }
}

}  // namespace tp_train

using namespace tp_train;

TEST_CASE("tp 2 (and with sequence parallel) logs the losses of one process for 10 AdamW steps with grad_clip",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_train");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto single = test::train_tiny_gpt("", "run " + cfg + kTpArgs, dir / "single");
  tp_require_trained(single, kTpSteps, 1);
  auto tp = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + kTpArgs + " --set dist.tensor_parallel=2", dir / "tp");
  tp_require_trained(tp, kTpSteps, 2);
  CHECK(tp.output.find("tensor parallel 2 (data parallel 1)") != std::string::npos);
  tp_check_same_losses(single, tp);
  auto sp = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + kTpArgs +
                                         " --set dist.tensor_parallel=2 --set dist.sequence_parallel=true",
                                 dir / "sp");
  tp_require_trained(sp, kTpSteps, 2);
  tp_check_same_losses(single, sp);
  // the records carry the tp collectives' time
  CHECK(test::read_file(dir / "tp" / "tiny" / "metrics.jsonl").find("\"tp_comm_ms\"") != std::string::npos);
  CHECK(test::read_file(dir / "single" / "tiny" / "metrics.jsonl").find("\"tp_comm_ms\"") == std::string::npos);
  // data parallel 1: no DDP bucket buffers beside the gradients (a dp group of one averages nothing)
  const auto rec = test::records(dir / "tp" / "tiny" / "metrics.jsonl", "train").front();
  CHECK(rec.at("grad_bytes") == rec.at("param_bytes"));
  // the model's parameters, not rank 0's slices (it reported those)
  const auto params = [&](const char* run) {
    return test::records(dir / run / "tiny" / "metrics.jsonl", "summary").at(0).at("num_parameters").get<int64_t>();
  };
  CHECK(params("tp") == params("single"));
  CHECK(params("sp") == params("single"));
}

TEST_CASE("ViT at tp 2 logs the losses of one process for 10 AdamW steps with grad_clip, and resumes in one process",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_vit_train");
  test::write_file(dir / "tiny_vit.yaml", test::tp2d::kTinyVitYaml);
  const auto cfg = (dir / "tiny_vit.yaml").string();
  auto single = test::train_tiny_gpt("", "run " + cfg + kTpArgs, dir / "single");
  tp_require_trained(single, kTpSteps, 1);
  auto tp = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + kTpArgs + " --set dist.tensor_parallel=2", dir / "tp");
  tp_require_trained(tp, kTpSteps, 2);
  CHECK(tp.output.find("tensor parallel 2 (data parallel 1)") != std::string::npos);
  CHECK(std::abs(single.losses.back() - single.losses.front()) > 1e-3);  // it trains: the head leaves zero
  CHECK(test::records(dir / "tp" / "tiny" / "metrics.jsonl", "summary").at(0).at("num_parameters") ==
        test::records(dir / "single" / "tiny" / "metrics.jsonl", "summary").at(0).at("num_parameters"));
  tp_check_same_losses(single, tp);
  double worst = 0;
  for (size_t i = 0; i < kTpSteps; ++i) worst = std::max(worst, std::abs(single.losses[i] - tp.losses[i]) / std::abs(single.losses[i]));
  WARN("ViT tp 2 vs one process: worst relative loss difference over 10 steps " << worst);
  // a tp-2 checkpoint (global tensors) at step 5, resumed in one process
  auto first = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + kTpArgs +
                                            " --set dist.tensor_parallel=2 --set train.max_steps=5",
                                    dir / "resumed");
  tp_require_trained(first, 5, 2);
  auto rest = test::train_tiny_gpt("", "run " + cfg + kTpArgs + " --resume auto", dir / "resumed");
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  REQUIRE(rest.losses.size() == kTpSteps);
  tp_check_same_losses(single, rest, 5);
}

TEST_CASE("a tp 2 checkpoint (global tensors) resumes in one process and continues as the uninterrupted run",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_resume");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto single = test::train_tiny_gpt("", "run " + cfg + kTpArgs, dir / "single");
  tp_require_trained(single, kTpSteps, 1);
  // vocab 32 over 2: no padding; the checkpoint at step 5 is the run's final one
  auto first = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + kTpArgs +
                                            " --set dist.tensor_parallel=2 --set train.max_steps=5",
                                    dir / "resumed");
  tp_require_trained(first, 5, 2);
  // the same schedule length as the uninterrupted run: the lr at each step is the same
  auto rest = test::train_tiny_gpt("", "run " + cfg + kTpArgs + " --resume auto", dir / "resumed");
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  REQUIRE(rest.losses.size() == kTpSteps);
  tp_check_same_losses(single, rest, 5);
}

TEST_CASE("trainer run with dist.tensor_parallel 2 in one process exits 2 naming the key's file:line:col", "[e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_world");
  std::string yaml = test::kTinyGptYaml;
  const std::string at = "  timeout_s: 60\n";
  yaml.replace(yaml.find(at), at.size(), at + "  tensor_parallel: 2\n");  // line 32
  test::write_file(dir / "tp.yaml", yaml);
  auto r = test::run_trainer("run " + (dir / "tp.yaml").string() + " --out-dir " + (dir / "out").string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("tp.yaml:32:3: dist.tensor_parallel: 2 does not divide the world size 1") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "out" / "tiny"));  // nothing started
}

TEST_CASE("model.init at tp 2 (a padded vocabulary) loads the full file and slices it as at initialisation",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_init");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string v33 = " --set model.vocab_size=33 --set train.max_steps=5";
  auto base = test::train_tiny_gpt("", "run " + cfg + v33, dir / "base");
  tp_require_trained(base, 5, 1);
  const auto init = dir / "init.safetensors";
  auto ex = test::run_trainer("export " + (dir / "base" / "tiny" / "checkpoints").string() + " --out " + init.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  const std::string from = v33 + " --set model.init.from=" + init.string();
  auto one = test::train_tiny_gpt("", "run " + cfg + from, dir / "one");
  tp_require_trained(one, 5, 1);
  auto tp = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + from + " --set dist.tensor_parallel=2", dir / "tp");
  tp_require_trained(tp, 5, 2);
  CHECK(std::abs(one.losses[0] - base.losses[0]) > 1e-3);  // it starts from the file, not from the seed
  for (size_t i = 0; i < 5; ++i) {
    INFO("step " << i + 1);
    CHECK(std::abs(one.losses[i] - tp.losses[i]) <= kTpRel * std::abs(one.losses[i]));
  }
}

TEST_CASE("tp 2 with dropout (sequence parallel): activation checkpointing's recompute and a resume draw the same masks",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_dropout");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  // the attention probabilities draw each tp rank's own stream, the sequence chunks' residual dropout too
  const std::string tp2 = "launch -n 2 -- run " + cfg + kTpArgs + " --set dist.tensor_parallel=2 --set "
                          "dist.sequence_parallel=true";
  auto off = test::train_tiny_gpt("", tp2, dir / "off");
  tp_require_trained(off, kTpSteps, 2);
  const std::string drop = " --set model.dropout=0.2";
  auto plain = test::train_tiny_gpt("", tp2 + drop, dir / "plain");
  tp_require_trained(plain, kTpSteps, 2);
  CHECK(std::abs(plain.losses[0] - off.losses[0]) > 1e-4);  // dropout is on
  auto ckpt = test::train_tiny_gpt("", tp2 + drop + " --set model.activation_checkpointing=true", dir / "ckpt");
  tp_require_trained(ckpt, kTpSteps, 2);
  tp_check_same_losses(plain, ckpt);  // the recompute drew the forward's masks (another mask: ~1e-2 apart)
  auto first = test::train_tiny_gpt("", tp2 + drop + " --set train.max_steps=5", dir / "resumed");
  tp_require_trained(first, 5, 2);
  auto rest = test::train_tiny_gpt("", tp2 + drop + " --resume auto", dir / "resumed");
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  REQUIRE(rest.losses.size() == kTpSteps);
  tp_check_same_losses(plain, rest, 5);  // the region streams come from the checkpoint's default state
}
