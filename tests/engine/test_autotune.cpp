// model.attention auto: when it times, what it picks, and that a run keeps its choice.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/startup/autotune.hpp"
#include "engine/memory_runs.hpp"
#include "test_util.hpp"

using namespace trainer;
using namespace trainer::engine;

namespace {
// The GPT family's probe: the engine takes the attention's shape and kernel from the ModelSpec.
models::AttentionProbe gpt_probe(const config::ModelConfig& m) {
  return models::builtin_models().spec("gpt").attention_probe(m);
}
}  // namespace

TEST_CASE("attention auto: GPT's probe is one attention call of its config", "[unit]") {
  config::ModelConfig m;
  m.n_head = 4;
  m.n_embd = 64;
  m.block_size = 24;
  const auto p = gpt_probe(m);
  CHECK(p.heads == 4);
  CHECK(p.seq == 24);
  CHECK(p.head_size == 16);
  auto q = torch::randn({2, 4, 24, 16}), k = torch::randn({2, 4, 24, 16}), v = torch::randn({2, 4, 24, 16});
  const auto fused = p.run(q, k, v, false), math = p.run(q, k, v, true);
  CHECK(fused.sizes().vec() == q.sizes().vec());
  CHECK(torch::allclose(fused, math, 1e-4, 1e-5));  // the same attention, two kernels
}

TEST_CASE("attention auto: sdpa without timing for fp32, deterministic runs and non-CPU devices", "[unit]") {
  config::ModelConfig m;
  m.arch = "gpt";
  const torch::Device cpu(torch::kCPU);
  auto fp32 = choose_attention(gpt_probe(m), 8, Precision::Fp32, cpu, false);
  CHECK(fp32.attention == config::Attention::Sdpa);
  CHECK(fp32.sdpa_ms == 0);
  auto det = choose_attention(gpt_probe(m), 8, Precision::Bf16, cpu, true);
  CHECK(det.attention == config::Attention::Sdpa);
  CHECK(det.reason == "run.deterministic: not timed");
}

TEST_CASE("attention auto on a CPU under bf16 times both paths and takes math only when 20 % faster", "[unit]") {
  config::ModelConfig m;
  m.arch = "gpt";
  m.n_head = 2;
  m.n_embd = 32;
  m.block_size = 32;
  auto c = choose_attention(gpt_probe(m), 4, Precision::Bf16, torch::Device(torch::kCPU), false);
  INFO(c.reason);
  CHECK(c.sdpa_ms > 0);
  CHECK(c.math_ms > 0);
  CHECK(c.attention == (c.math_ms < 0.8 * c.sdpa_ms ? config::Attention::Math : config::Attention::Sdpa));
  CHECK(c.reason.find("(4, 2, 32, 16) bf16 on cpu") != std::string::npos);
}

TEST_CASE("a run with attention auto writes its choice to autotune.json and a resume keeps it", "[e2e]") {
  auto dir = test::scratch_dir("autotune_run");
  const auto cfg = test::auto_config(dir);
  const std::string common = " --set train.batch_size=8 --set train.precision=bf16 --set run.deterministic=false "
                             "--set checkpoint.every_steps=2 "
                             "--out-dir " + (dir / "runs").string();
  auto first = test::run_trainer("run " + cfg + common + " --set train.max_steps=2");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  auto j = nlohmann::json::parse(test::read_file(dir / "runs/auto/autotune.json"));
  const std::string chosen = j.at("model.attention").get<std::string>();
  CHECK((chosen == "math" || chosen == "sdpa"));
  CHECK(j.at("sdpa_ms").get<double>() > 0);
  CHECK(first.output.find("model.attention auto: " + chosen + " (timed forward + backward") != std::string::npos);

  // the resumed run reads the choice back instead of timing again
  auto second = test::run_trainer("run " + cfg + common + " --set train.max_steps=4");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK(second.output.find("model.attention auto: " + chosen + " (kept from") != std::string::npos);
  CHECK(second.output.find("timed forward + backward") == std::string::npos);
}
