// Memory estimates (fixed parts counted, activations measured) and train.batch_size auto.
#include <catch2/catch.hpp>

#include <algorithm>

#include <c10/core/CPUAllocator.h>

#include "engine/startup/memory_plan.hpp"
#include "models/model.hpp"
#include "engine/memory_runs.hpp"
#include "models/model_test_util.hpp"
#include "test_util.hpp"

using namespace trainer;
using namespace trainer::engine;

namespace {

// tests/models' tiny GPT (vocab 64, block 16), with or without activation checkpointing
models::ModelPtr small_gpt(bool checkpointing) {
  auto cfg = test::tiny_gpt_cfg();
  cfg.activation_checkpointing = checkpointing;
  return test::make_model(cfg);
}

}  // namespace

TEST_CASE("fixed memory counts parameters, gradients, optimizer state and DDP buckets", "[unit]") {
  auto model = small_gpt(false);
  const int64_t p = model->num_parameters() * 4;  // fp32
  config::OptimConfig adamw;
  adamw.name = config::OptimizerKind::Adamw;
  auto m = fixed_memory(*model, adamw, 1);
  CHECK(m.parameters == p);
  CHECK(m.gradients == p);
  CHECK(m.optimizer == 2 * p);  // exp_avg + exp_avg_sq
  CHECK(m.ddp_buckets == 0);
  config::OptimConfig sgd;  // momentum 0.9 by default: one buffer
  CHECK(fixed_memory(*model, sgd, 2).optimizer == p);
  CHECK(fixed_memory(*model, sgd, 2).ddp_buckets == p);
  sgd.momentum = 0;
  CHECK(fixed_memory(*model, sgd, 1).optimizer == 0);
  CHECK(fixed_memory(*model, sgd, 1).total() == p);  // the gradients are part of the measured step
}

TEST_CASE("fixed memory with dist.sharding: optimizer state 1/N, with gradients the buckets 1/N, with full the parameters 1/N", "[unit]") {
  auto model = small_gpt(false);
  const int64_t p = model->num_parameters() * 4;
  config::OptimConfig adamw;
  adamw.name = config::OptimizerKind::Adamw;
  const auto z1 = fixed_memory(*model, adamw, 4, config::Sharding::Optimizer);
  CHECK(z1.optimizer == (2 * p + 3) / 4);
  CHECK(z1.ddp_buckets == p);  // ZeRO-1 all-reduces a full gradient buffer
  const auto z2 = fixed_memory(*model, adamw, 4, config::Sharding::Gradients);
  CHECK(z2.optimizer == (2 * p + 3) / 4);
  CHECK(z2.ddp_buckets == (p + 3) / 4);
  CHECK(z2.parameters == p);  // parameters stay whole up to ZeRO-2
  CHECK(z2.gathered == 0);
  CHECK(fixed_memory(*model, adamw, 1, config::Sharding::Gradients).optimizer == 2 * p);  // a single process shards nothing
  // ZeRO-3: the parameters' slice too, plus the gathered units: the tied embeddings throughout,
  // and two of the largest other unit (running + prefetched)
  const auto z3 = fixed_memory(*model, adamw, 4, config::Sharding::Full);
  const auto units = unit_param_bytes(*model);
  REQUIRE(units.size() >= 3);
  int64_t sum = 0;
  for (auto u : units) sum += u;
  CHECK(sum == p);  // the units partition the parameters
  const int64_t unit = *std::max_element(units.begin() + 1, units.end());
  CHECK(unit < p);
  CHECK(z3.parameters == (p + 3) / 4);
  CHECK(z3.optimizer == (2 * p + 3) / 4);
  CHECK(z3.ddp_buckets == (p + 3) / 4);
  CHECK(z3.gathered == units.front() + 2 * unit);
  CHECK(z3.total() == z3.parameters + z3.optimizer + z3.ddp_buckets + z3.gathered);
  CHECK(fixed_memory(*model, adamw, 1, config::Sharding::Full).parameters == p);
}

TEST_CASE("the activation probe measures per-sample bytes, checkpointing needs fewer, nothing is left behind", "[unit]") {
  c10::Allocator* before = c10::GetCPUAllocator();
  auto plain = small_gpt(false), ckpt = small_gpt(true);
  const torch::Device cpu(torch::kCPU);
  // as the run probes: from micro-batches 1 and 2, doubling while the spike hides the activations
  auto a = probe_activations(*plain, {16}, 64, Precision::Fp32, cpu, false, 1, 2, /*max_b2=*/16);
  auto b = probe_activations(*ckpt, {16}, 64, Precision::Fp32, cpu, false, 1, 2, /*max_b2=*/16);
  CHECK(c10::GetCPUAllocator() == before);  // the counting allocator is gone again
  for (auto& p : plain->parameters()) CHECK(!p.grad().defined());
  INFO("per sample: plain " << a.per_sample() << " B, checkpointed " << b.per_sample() << " B");
  CHECK(a.how == "CPU counting allocator");
  CHECK(a.peak2 > a.peak1);
  // at least the logits (T x V fp32) and their gradient are held per sample
  CHECK(a.per_sample() >= 2.0 * 16 * 64 * 4);
  CHECK(b.per_sample() < a.per_sample());
  // the parameter gradients are allocated inside the step: the peak at the larger batch holds them
  CHECK(a.peak2 >= static_cast<double>(plain->num_parameters() * 4));
  // the two-point fit predicts the measured peak of a 4x larger micro-batch within 10 %
  const int64_t big = 4 * a.b2;
  auto measured = probe_activations(*plain, {16}, 64, Precision::Fp32, cpu, false, big, big);
  INFO("probed at " << a.b1 << " and " << a.b2 << "; micro-batch " << big << ": predicted " << a.at(big)
                    << " B, measured " << measured.peak1 << " B");
  CHECK(a.at(big) == Approx(measured.peak1).epsilon(0.1));
  // the same model measures the same twice (the estimate is reproducible)
  auto again = probe_activations(*plain, {16}, 64, Precision::Fp32, cpu, false, 1, 2, /*max_b2=*/16);
  CHECK(again.per_sample() == Approx(a.per_sample()).epsilon(0.02));
}

TEST_CASE("micro-batch candidates are the divisors of the per-rank batch, largest first", "[unit]") {
  CHECK(micro_batch_candidates(12) == std::vector<int64_t>{12, 6, 4, 3, 2, 1});
  CHECK(micro_batch_candidates(1) == std::vector<int64_t>{1});
  CHECK(micro_batch_candidates(49) == std::vector<int64_t>{49, 7, 1});
}

TEST_CASE("largest_fitting and the OOM search pick the largest candidate within the budget", "[unit]") {
  FixedMemory fixed;
  fixed.parameters = fixed.gradients = 100;
  fixed.optimizer = 200;  // held: 300 (the gradients fall inside the measured step)
  ActivationProbe probe;
  probe.b1 = 2;
  probe.b2 = 4;
  probe.peak1 = 150 + 2 * 50;  // intercept 150, 50 per sample
  probe.peak2 = 150 + 4 * 50;
  REQUIRE(probe.per_sample() == 50);
  REQUIRE(probe.intercept() == 150);
  const auto c = micro_batch_candidates(24);
  CHECK(largest_fitting(fixed, probe, 300 + 150 + 24 * 50, c) == 24);
  CHECK(largest_fitting(fixed, probe, 300 + 150 + 23 * 50, c) == 12);  // 23 is no divisor of 24
  CHECK(largest_fitting(fixed, probe, 300 + 150 + 50, c) == 1);
  CHECK(largest_fitting(fixed, probe, 300 + 150 + 49, c) == 0);
  // CUDA: from the estimate down until a real step fits; larger candidates are never tried
  std::vector<int64_t> tried;
  auto fits = [&](int64_t b) {
    tried.push_back(b);
    return b <= 5;
  };
  CHECK(search_fitting(c, 12, fits) == 4);
  CHECK(tried == std::vector<int64_t>{12, 8, 6, 4});
  tried.clear();
  CHECK(search_fitting(c, 24, [&](int64_t b) { return fits(b) && false; }) == 0);
  CHECK(tried.size() == c.size());
}


TEST_CASE("trainer check --memory prints the table, batch_size auto picks what check predicts", "[e2e]") {
  auto dir = test::scratch_dir("auto_batch");
  const auto cfg = test::auto_config(dir);
  const auto check = test::check_memory(cfg);
  INFO(check.output);
  REQUIRE(check.exit_code == 0);
  CHECK(test::row_bytes(check.output, "gradients \\(inside the step\\)") == check.parameters);
  CHECK(check.optimizer == 2 * check.parameters);  // AdamW: two moments
  CHECK(check.step_constant >= 0);
  CHECK(check.output.find("activation checkpointing") != std::string::npos);
  const double fixed = check.held(), constant = check.step_constant, per_sample = check.per_sample;
  REQUIRE(per_sample > 0);

  // a budget for 5.5 samples: of the divisors of 16, micro-batch 4 fits and 8 does not
  const double budget_gb = (fixed + constant + 5.5 * per_sample) / 1e9;
  const std::string set = " --set train.memory_budget_gb=" + std::to_string(budget_gb);
  auto predicted = test::run_trainer("check " + cfg + " --memory" + set);
  INFO(predicted.output);
  CHECK(predicted.output.find("train.batch_size auto would pick micro-batch 4 x 4 accumulation") != std::string::npos);
  auto run = test::run_trainer("run " + cfg + set + " --out-dir " + (dir / "small").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("train.batch_size auto: micro-batch 4 x 4 accumulation x 1 rank(s) = global batch 16") !=
        std::string::npos);
  // the resumed run keeps the micro-batch from autotune.json instead of measuring again
  auto resumed = test::run_trainer("run " + cfg + set + " --set train.max_steps=6 --out-dir " + (dir / "small").string());
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("resumed from ") != std::string::npos);
  CHECK(resumed.output.find("train.batch_size auto: micro-batch 4 x 4 accumulation x 1 rank(s) = global batch 16 "
                            "(kept from") != std::string::npos);

  // plenty of memory: the whole per-rank batch in one micro-batch
  auto big = test::run_trainer("run " + cfg + " --set train.memory_budget_gb=8 --out-dir " + (dir / "big").string());
  INFO(big.output);
  REQUIRE(big.exit_code == 0);
  CHECK(big.output.find("train.batch_size auto: micro-batch 16 x 1 accumulation x 1 rank(s)") != std::string::npos);

  // too little for even one sample: a clear error before training, nothing trained
  auto none = test::run_trainer("run " + cfg + " --set train.memory_budget_gb=0.000001 --out-dir " + (dir / "none").string());
  CHECK(none.exit_code == 1);
  CHECK(none.output.find("train.batch_size auto: not even a micro-batch of 1 fits") != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "none/auto/checkpoints/step-4"));
  // check says so too, and fails as the run does; a budget of --memory-gb's only informs
  auto none_check = test::run_trainer("check " + cfg + " --set train.memory_budget_gb=0.000001");
  INFO(none_check.output);
  CHECK(none_check.exit_code == 1);
  CHECK(none_check.output.find("error: train.batch_size auto: not even micro-batch 1 fits 1000 B "
                               "(train.memory_budget_gb): a run of this config stops at its start") != std::string::npos);
  auto asked = test::run_trainer("check " + cfg + " --memory-gb 0.000001");
  INFO(asked.output);
  CHECK(asked.exit_code == 0);
  CHECK(asked.output.find("train.batch_size auto: not even micro-batch 1 fits this budget") != std::string::npos);
}

TEST_CASE("the memory budget: the configured figure, else 80 % of available host memory per local rank", "[unit]") {
  const torch::Device cpu(torch::kCPU);
  auto set = memory_budget(1.5, "train.memory_budget_gb", cpu, 4);
  CHECK(set.bytes == 1.5e9);
  CHECK(set.source == "train.memory_budget_gb");
  const auto avail = available_host_memory();
  REQUIRE(avail.has_value());
  CHECK(*avail > 0);
  auto one = memory_budget(0, "train.memory_budget_gb", cpu, 1);
  auto four = memory_budget(0, "train.memory_budget_gb", cpu, 4);
  CHECK(one.bytes == Approx(0.8 * *avail).epsilon(0.05));  // MemAvailable moves a little between reads
  CHECK(four.bytes == Approx(one.bytes / 4).epsilon(0.05));
  CHECK(four.source == "80 % of the host's available memory / 4 local rank(s)");
}
