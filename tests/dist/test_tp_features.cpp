// The run's features on the mesh (issue 24). train.ema at tp 2 and at dp 2 x tp 2 fully sharded keeps
// each rank's slices of the shadow and evaluates it over the tp group: the EMA losses of one process,
// a checkpoint whose ema.safetensors holds the one-process run's global tensors, and a resume that
// continues them. train.ema.lookahead at tp 2 and pp 2: one process's losses, ending on the average. `trainer check --memory` at tp 2 reports one rank's slices (fewer parameter bytes,
// fewer activation bytes per sample than tp 1), and train.batch_size auto at tp 2 picks what that
// table predicts, the same on both ranks, and logs the losses of the fixed micro-batch.
#include <catch2/catch.hpp>

#include "ckpt/ckpt_runs.hpp"
#include "engine/memory_runs.hpp"
#include "spawn.hpp"
#include "tp2d_runs.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace tp_features {  // named: the unity build joins the dist tests

using namespace test::tp2d;

// The EMA losses of the run's evaluation records (steps 5 and 10).
std::vector<double> ema_losses(const std::filesystem::path& out) {
  std::vector<double> r;
  for (const auto& j : test::records(out / "tiny" / "metrics.jsonl", "eval")) r.push_back(j.at("ema_loss"));
  return r;
}

void check_same_ema(const std::vector<double>& ref, const std::vector<double>& b, const char* what) {
  REQUIRE(ref.size() == 2);
  REQUIRE(b.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO(what << ", evaluation " << i + 1 << ": ema_loss " << ref[i] << " vs " << b[i]);
    CHECK(std::abs(ref[i] - b[i]) <= kRel * std::abs(ref[i]));
  }
}

TEST_CASE("train.ema at tp 2 and at dp 2 x tp 2 fully sharded gives one process's EMA figures, and its checkpoint holds "
          "the global tensors and resumes",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_ema");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string ema = kArgs + " --set train.ema.decay=0.9 --set train.ema.every=2 --set train.ema.eval=true "
                                  "--set train.eval_every=5 --set checkpoint.every_steps=5";
  auto single = test::train_tiny_gpt("", "run " + cfg + ema + " --set train.batch_size=16", dir / "single");
  require_trained(single, kSteps, 1);
  const auto ref = ema_losses(dir / "single");

  auto tp = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + ema + kTp2 + " --set train.batch_size=16", dir / "tp");
  require_trained(tp, kSteps, 2);
  check_same_losses(single, tp, "tp 2 with EMA");
  check_same_ema(ref, ema_losses(dir / "tp"), "tp 2");
  // the shadow differs from the live weights (decay 0.9): the EMA figure is its own
  const auto rec = test::records(dir / "tp" / "tiny" / "metrics.jsonl", "eval").back();
  CHECK(std::abs(rec.at("ema_loss").get<double>() - rec.at("loss").get<double>()) > 1e-4);
  // the shadow's parts assemble into the one-process run's: names, shapes and values
  const auto ck = [](const std::filesystem::path& out) { return out / "tiny" / "checkpoints" / "step-10"; };
  check_same_tensors(ck(dir / "single"), ck(dir / "tp"), "ema", 1e-3);

  auto full = test::train_tiny_gpt(
      "", k2d + cfg + ema + kTp2 + " --set dist.sharding=full --set train.batch_size=8", dir / "full");
  require_trained(full, kSteps, 4);
  check_same_ema(ref, ema_losses(dir / "full"), "dp 2 x tp 2, full");
  check_same_tensors(ck(dir / "single"), ck(dir / "full"), "ema", 1e-3);

  // the one-process step-5 checkpoint (its shadow) resumed at tp 2: the evaluation at step 10 as before
  auto five = test::train_tiny_gpt("", "run " + cfg + ema + " --set train.batch_size=16 --set train.max_steps=5",
                                   dir / "resumed");
  require_trained(five, 5, 1);
  auto rest = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + ema + kTp2 + " --set train.batch_size=16",
                                   dir / "resumed");
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  CHECK(rest.output.find("no EMA weights in this checkpoint") == std::string::npos);
  check_same_ema(ref, ema_losses(dir / "resumed"), "one process -> tp 2 at step 5");
}

// train.ema.lookahead pulls the weights back to the shadow every `every` steps and at the last: on
// the mesh each rank pulls its own slices (tp) or its stages' weights (pp) back. The losses after
// each pull are one process's, and every layout ends on one process's average.
TEST_CASE("train.ema.lookahead at tp 2 and at pp 2 gives one process's losses and ends on its average",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_lookahead");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  // decay 0.9 x (t / 10)^3 at steps 3, 6, 9 and 10 (the last): 0.02, 0.19, 0.66, 0.9
  const std::string la = kArgs + " --set train.ema.decay=0.9 --set train.ema.every=3 --set train.ema.lookahead=true";
  auto plain = test::train_tiny_gpt("", "run " + cfg + kArgs, dir / "plain");
  require_trained(plain, kSteps, 1);
  auto single = test::train_tiny_gpt("", "run " + cfg + la, dir / "single");
  require_trained(single, kSteps, 1);
  for (size_t i = 0; i < 3; ++i) CHECK(single.losses[i] == plain.losses[i]);  // the first pull follows step 3
  CHECK(std::abs(single.losses[6] - plain.losses[6]) > 1e-4 * plain.losses[6]);  // and the pulls move the weights
  const auto last = [](const std::filesystem::path& out) { return out / "tiny" / "checkpoints" / "step-10"; };
  for (const auto& [layout, what] : {std::pair<std::string, const char*>{kTp2, "tp 2"},
                                     {" --set dist.pipeline_parallel=2", "pp 2"}}) {
    const auto out = dir / (what[0] == 't' ? "tp" : "pp");
    auto run = test::train_tiny_gpt("", "launch -n 2 -- run " + cfg + la + layout, out);
    require_trained(run, kSteps, 2);
    check_same_losses(single, run, what);
    check_same_tensors(last(dir / "single"), last(out), "model", 1e-3);
    // the run ended on the average: its weights are its shadow, every slice and stage of them
    const auto model = group_tensors(last(out), "model"), ema = group_tensors(last(out), "ema");
    REQUIRE(model.size() == ema.size());
    for (const auto& [name, t] : model) {
      INFO(what << ": " << name);
      CHECK(torch::equal(t, ema.at(name)));
    }
  }
}

TEST_CASE("trainer check --memory at tp 2 reports one rank's slices, and train.batch_size auto at tp 2 picks what it "
          "predicts",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_auto_batch");
  const auto cfg = test::auto_config(dir);
  const auto whole = test::check_memory(cfg);
  REQUIRE(whole.exit_code == 0);
  const auto tp = test::check_memory(cfg + " --set dist.tensor_parallel=2");
  INFO(whole.output << "\n" << tp.output);
  REQUIRE(tp.exit_code == 0);
  CHECK(tp.output.find("(one rank of the mesh: its slices at tp 2") != std::string::npos);
  // a rank's slices: more than half the model (LayerNorms, biases of the row-parallel layers and wpe
  // are replicated), less than all of it; AdamW's two moments of those
  CHECK(tp.parameters < whole.parameters);
  CHECK(tp.parameters > whole.parameters / 2);
  CHECK(tp.optimizer == Approx(2 * tp.parameters).epsilon(1e-3));  // as printed: to 0.01 KiB
  REQUIRE(tp.per_sample > 0);
  CHECK(tp.per_sample < whole.per_sample);  // half the heads, half the MLP, half the vocabulary's logits

  // a budget for 5.5 samples of a rank's measure: of the divisors of 16 (one dp rank), 4 fits and 8 does not
  const double budget_gb = (tp.held() + tp.step_constant + 5.5 * tp.per_sample) / 1e9;
  const std::string set = " --set dist.tensor_parallel=2 --set train.memory_budget_gb=" + std::to_string(budget_gb);
  auto predicted = test::run_trainer("check " + cfg + " --memory" + set);
  INFO(predicted.output);
  CHECK(predicted.output.find("train.batch_size auto would pick micro-batch 4 x 4 accumulation") != std::string::npos);
  auto run = test::run_trainer("launch -n 2 -- run " + cfg + set + " --out-dir " + (dir / "auto").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("train.batch_size auto: micro-batch 4 x 4 accumulation x 1 rank(s) = global batch 16") !=
        std::string::npos);
  CHECK(run.output.find("on one rank's slices of tp 2") != std::string::npos);
  CHECK(test::read_file(dir / "auto/auto/logs/rank1.log").find("micro-batch 4 x 4 accumulation") != std::string::npos);

  auto fixed = test::run_trainer("launch -n 2 -- run " + cfg + " --set dist.tensor_parallel=2 --set train.batch_size=16 "
                                 "--out-dir " + (dir / "fixed").string());
  INFO(fixed.output);
  REQUIRE(fixed.exit_code == 0);
  const auto a = test::train_losses(dir / "auto/auto/metrics.jsonl"), b = test::train_losses(dir / "fixed/auto/metrics.jsonl");
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (int64_t s = 1; s <= 4; ++s) {
    INFO("step " << s << ": micro-batch 4 x 4 " << a.at(s) << ", micro-batch 16 " << b.at(s));
    CHECK(a.at(s) == Approx(b.at(s)).margin(test::kLossTolerance).epsilon(0));
  }
}

}  // namespace tp_features
