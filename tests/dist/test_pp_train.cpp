// Pipeline parallel end to end: `trainer launch` of the tiny GPT (and ViT) with dist.pipeline_parallel
// (fp32, AdamW, grad_clip) logs the losses and gradient norms of one process at the same global batch
// within 1e-6 relative for 10 steps, for every schedule at P 2 and 4, M < P and uneven stages; with
// data parallel and tensor parallel (3-D on the 4 processes this machine allows); evaluation through
// the stages scores as one process; the tied wte / lm_head copies of the first and last stage end
// bit for bit equal; a pp 2 x dp 2 checkpoint (in parts, global tensors) resumes at pp 4, at dp 4
// and in one process, and exports the full model.
#include <catch2/catch.hpp>

#include <regex>

#include <fmt/format.h>

#include "ckpt/ckpt_runs.hpp"
#include "engine/memory_runs.hpp"
#include "spawn.hpp"
#include "tp2d_runs.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace pp_train {  // named: the unity build joins the dist tests

// 10 steps, grad_clip 0.5, weight decay, global batch 16 (test::tp2d's)
const std::string kPpArgs = test::tp2d::kArgs;

// One process at the global batch 16: the reference of every layout.
test::TrainRun one_process(const std::string& cfg, const std::filesystem::path& dir, const std::string& extra = "") {
  auto run = test::train_tiny_gpt("", "run " + cfg + kPpArgs + extra, dir / "single");
  test::tp2d::require_trained(run, test::tp2d::kSteps, 1);
  return run;
}

test::TrainRun launched(int n, const std::string& cfg, const std::string& layout, const std::filesystem::path& out) {
  return test::train_tiny_gpt("", "launch -n " + std::to_string(n) + " -- run " + cfg + kPpArgs + layout, out);
}

}  // namespace pp_train

using namespace pp_train;

TEST_CASE("pp 2: every schedule logs one process's losses and gradient norms for 10 AdamW steps", "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_schedules");
  auto cfg = test::write_tiny_gpt_config(dir).string();  // 2 blocks: 4 units
  auto single = one_process(cfg, dir);
  for (const std::string sched : {"gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"}) {
    const std::string v = sched == "interleaved_1f1b" ? " --set dist.pipeline.virtual_stages=2" : "";
    auto pp = launched(2, cfg, " --set dist.pipeline_parallel=2 --set dist.pipeline.schedule=" + sched + v, dir / sched);
    test::tp2d::require_trained(pp, test::tp2d::kSteps, 2);
    CHECK(pp.output.find("pipeline parallel 2 (data parallel 1): stage") != std::string::npos);
    test::tp2d::check_same_losses(single, pp, sched.c_str());
    test::tp2d::check_same_grad_norms(dir / "single", dir / sched, sched.c_str());
    // the records carry rank 0's measured wait for its neighbours and the bubble it makes
    const auto rec = test::records(dir / sched / "tiny" / "metrics.jsonl", "train").back();
    REQUIRE(rec.contains("pp_bubble"));
    CHECK(rec.at("pp_bubble").get<double>() >= 0);
    CHECK(rec.at("pp_bubble").get<double>() <= 1);
    CHECK(rec.at("pp_wait_ms").get<double>() >= 0);
  }
  CHECK_FALSE(test::records(dir / "single" / "tiny" / "metrics.jsonl", "train").back().contains("pp_bubble"));
}

TEST_CASE("pp 4 with fewer microbatches than stages, and pp 2 over uneven stages", "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_uneven");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto single = one_process(cfg, dir);
  // 4 units on 4 ranks, M 2 < P 4: the batch of 16 in 2 microbatches of 8
  auto p4 = launched(4, cfg, " --set dist.pipeline_parallel=4 --set dist.pipeline.microbatches=2", dir / "p4");
  test::tp2d::require_trained(p4, test::tp2d::kSteps, 4);
  test::tp2d::check_same_losses(single, p4, "pp 4, M 2");
  // 3 blocks: 5 units on 2 stages (auto), and the list 1 | 4
  auto single3 = test::train_tiny_gpt("", "run " + cfg + kPpArgs + " --set model.n_layer=3", dir / "single3");
  test::tp2d::require_trained(single3, test::tp2d::kSteps, 1);
  auto uneven = launched(2, cfg, " --set model.n_layer=3 --set dist.pipeline_parallel=2", dir / "uneven");
  test::tp2d::require_trained(uneven, test::tp2d::kSteps, 2);
  test::tp2d::check_same_losses(single3, uneven, "5 units on 2 stages");
  auto listed = launched(2, cfg, " --set model.n_layer=3 --set dist.pipeline_parallel=2 --set dist.pipeline.stages=[0,1-4]",
                         dir / "listed");
  test::tp2d::require_trained(listed, test::tp2d::kSteps, 2);
  test::tp2d::check_same_losses(single3, listed, "stages [0, 1-4]");
}

TEST_CASE("3-D: pp 2 x dp 2 and pp 2 x tp 2 log one process's losses, ViT at pp 2 too", "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_3d");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto single = one_process(cfg, dir);
  auto ppdp = launched(4, cfg, " --set dist.pipeline_parallel=2", dir / "ppdp");  // dp = 4 / 2
  test::tp2d::require_trained(ppdp, test::tp2d::kSteps, 4);
  CHECK(ppdp.output.find("pipeline parallel 2 (data parallel 2: replicated (DDP) over dp groups of 2 ranks): stage 0 "
                         "(units 0-1) on pp rank 0 of 2, 1f1b, 4 microbatches a batch") != std::string::npos);
  test::tp2d::check_same_losses(single, ppdp, "pp 2 x dp 2");
  auto pptp = launched(4, cfg, " --set dist.pipeline_parallel=2 --set dist.tensor_parallel=2", dir / "pptp");
  test::tp2d::require_trained(pptp, test::tp2d::kSteps, 4);
  test::tp2d::check_same_losses(single, pptp, "pp 2 x tp 2");
  test::tp2d::check_same_grad_norms(dir / "single", dir / "pptp", "pp 2 x tp 2");

  test::write_file(dir / "vit.yaml", test::tp2d::kTinyVitYaml);
  const auto vit = (dir / "vit.yaml").string();
  auto vsingle = test::train_tiny_gpt("", "run " + vit + kPpArgs, dir / "vsingle");
  test::tp2d::require_trained(vsingle, test::tp2d::kSteps, 1);
  auto vpp = launched(2, vit, " --set dist.pipeline_parallel=2", dir / "vpp");
  test::tp2d::require_trained(vpp, test::tp2d::kSteps, 2);
  test::tp2d::check_same_losses(vsingle, vpp, "ViT pp 2");
}

TEST_CASE("pp 2: evaluation through the stages scores as one process, the tied copies end bit for bit equal",
          "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_eval");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string ev = " --set train.eval_every=5";
  auto single = one_process(cfg, dir, ev);
  auto pp = launched(2, cfg, ev + " --set dist.pipeline_parallel=2", dir / "pp");
  test::tp2d::require_trained(pp, test::tp2d::kSteps, 2);
  auto e1 = test::records(dir / "single" / "tiny" / "metrics.jsonl", "eval");
  auto e2 = test::records(dir / "pp" / "tiny" / "metrics.jsonl", "eval");
  REQUIRE(e1.size() == 2);
  REQUIRE(e2.size() == e1.size());
  for (size_t i = 0; i < e1.size(); ++i) {
    const double a = e1[i].at("loss"), b = e2[i].at("loss");
    INFO("eval " << i << ": " << a << " vs " << b);
    CHECK(std::abs(a - b) <= 1e-6 * a);
  }
  // the end of the run compares the first and last stage's copies of the tied wte, bit for bit
  CHECK(pp.output.find("pipeline: the tied copies on the first and last stage are bit for bit equal "
                       "(transformer.wte.weight)") != std::string::npos);
}

TEST_CASE("a pp 2 x dp 2 checkpoint resumes at pp 4, at dp 4 and in one process, and exports the full model",
          "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_resume");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto single = one_process(cfg, dir);
  // the first 5 steps at pp 2 x dp 2 (their checkpoint is the run's final one), copied for each resume
  auto first = test::train_tiny_gpt("", "launch -n 4 -- run " + cfg + kPpArgs + " --set dist.pipeline_parallel=2 "
                                        "--set train.max_steps=5", dir / "first");
  test::tp2d::require_trained(first, 5, 4);
  const auto step5 = dir / "first" / "tiny" / "checkpoints" / "step-5";
  REQUIRE(std::filesystem::exists(step5 / "model-part0of2.safetensors"));
  REQUIRE(std::filesystem::exists(step5 / "model-part1of2.safetensors"));
  for (const auto& [name, n, layout] : std::vector<std::tuple<std::string, int, std::string>>{
           {"to_pp4", 4, " --set dist.pipeline_parallel=4"}, {"to_dp4", 4, " --set train.batch_size=4"}, {"to_one", 1, ""}}) {
    INFO(name);
    std::filesystem::copy(dir / "first", dir / name, std::filesystem::copy_options::recursive);
    // --resume PATH: continuing with other values (dp 4's batch of 4 a rank) is asked for by name
    const std::string resume = " --resume " + (dir / name / "tiny" / "checkpoints").string();
    auto rest = n == 1 ? test::train_tiny_gpt("", "run " + cfg + kPpArgs + resume, dir / name)
                       : test::train_tiny_gpt("", "launch -n 4 -- run " + cfg + kPpArgs + layout + resume, dir / name);
    INFO(rest.output);
    REQUIRE(rest.exit_code == 0);
    REQUIRE(rest.losses.size() == test::tp2d::kSteps);
    test::tp2d::check_same_losses(single, rest, name.c_str(), 5);
  }
  // the parts hold the one-process names and shapes; export writes the whole model
  auto one5 = test::train_tiny_gpt("", "run " + cfg + kPpArgs + " --set train.max_steps=5", dir / "one5");
  test::tp2d::require_trained(one5, 5, 1);
  test::tp2d::check_same_tensors(dir / "one5" / "tiny" / "checkpoints" / "step-5", step5, "model", 1e-3);
  test::tp2d::check_same_tensors(dir / "one5" / "tiny" / "checkpoints" / "step-5", step5, "optimizer", 1e-3);
  const auto out = dir / "pp.safetensors";
  auto ex = test::run_trainer("export " + step5.string() + " --out " + out.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  const auto f = io::load_safetensors(out.string());
  CHECK(f.tensors.size() == io::load_checkpoint_group(dir / "one5" / "tiny" / "checkpoints" / "step-5", "model").tensors.size());
}

// Each rank releases the weights of the stages it does not run (they were built only so that every
// rank draws one process's initial weights): a weight it needed would read zeros, and its losses
// would leave one process's. The EMA shadow releases the same tensors and follows the rest, so the
// checkpoint's EMA weights (gathered from the ranks' parts) are one process's too.
TEST_CASE("pp 2 releases the other stages' weights on each rank, and its EMA weights are one process's",
          "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_release");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string ema = " --set train.ema.decay=0.8";
  auto single = one_process(cfg, dir, ema);
  auto pp = launched(2, cfg, ema + " --set dist.pipeline_parallel=2", dir / "pp");
  test::tp2d::require_trained(pp, test::tp2d::kSteps, 2);
  test::tp2d::check_same_losses(single, pp, "pp 2 with train.ema");
  std::smatch m;
  REQUIRE(std::regex_search(pp.output, m, std::regex(R"((\d+) of the other stages released \(([\d.]+) (bytes|KiB|MiB|GiB)\))")));
  CHECK(std::stoi(m[1]) > 0);
  CHECK(std::stod(m[2]) > 0);
  const auto last = "step-" + std::to_string(test::tp2d::kSteps);
  const auto a = dir / "single" / "tiny" / "checkpoints" / last, b = dir / "pp" / "tiny" / "checkpoints" / last;
  // the losses agree to 1e-6; AdamW's normalised steps carry the last bits further into the weights
  test::tp2d::check_same_tensors(a, b, "model", 1e-4);
  test::tp2d::check_same_tensors(a, b, "ema", 1e-4);
  // model.init loads into the weights each rank holds (the released ones are another rank's to load)
  const auto init = dir / "ema.safetensors";
  auto ex = test::run_trainer("export " + a.string() + " --ema --out " + init.string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  const std::string from = " --set model.init.from=" + init.string();
  auto single2 = one_process(cfg, dir / "init", from);
  auto pp2 = launched(2, cfg, from + " --set dist.pipeline_parallel=2", dir / "init" / "pp");
  test::tp2d::require_trained(pp2, test::tp2d::kSteps, 2);
  test::tp2d::check_same_losses(single2, pp2, "pp 2 from model.init");
  CHECK(std::abs(single2.losses.front() - single.losses.front()) > 1e-3);  // it did start elsewhere
}

namespace pp_train {

// The largest of a `trainer check --memory` pipeline table's "total" row (one column per pp rank).
double peak_total(const std::string& out) {
  const auto at = out.find("\n  total ");
  if (at == std::string::npos) return -1;
  const std::string line = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  double most = -1;
  std::regex re("([0-9.]+) (B|KiB|MiB|GiB)");
  for (std::sregex_iterator it(line.begin(), line.end(), re), end; it != end; ++it) {
    const std::string u = (*it)[2].str();
    const double v = std::stod((*it)[1].str()) * (u == "B" ? 1 : u == "KiB" ? 1024.0 : u == "MiB" ? 1048576.0 : 1073741824.0);
    most = std::max(most, v);
  }
  return most;
}

}  // namespace pp_train

// 1F1B at pp 2 holds at most 2 microbatches on the first stage: micro-batch 16 (4 microbatches of 4)
// holds 8 samples' activations, 8 (4 of 2) holds 4, and 4 or fewer hold 2. A budget half way between
// the footprints of 1 and 16 fits 8, not 16.
TEST_CASE("train.batch_size auto at pp 2 picks what trainer check --memory predicts for the schedule, on both ranks, "
          "with the fixed micro-batch's losses",
          "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_auto_batch");
  const auto cfg = test::auto_config(dir);
  const std::string pp2 = " --set dist.pipeline_parallel=2";
  auto small = test::run_trainer("check " + cfg + " --memory" + pp2 + " --set train.batch_size=1");
  auto big = test::run_trainer("check " + cfg + " --memory" + pp2 + " --set train.batch_size=16");
  INFO(small.output << "\n" << big.output);
  REQUIRE(small.exit_code == 0);
  REQUIRE(big.exit_code == 0);
  const double lo = peak_total(small.output), hi = peak_total(big.output);
  REQUIRE(lo > 0);
  REQUIRE(hi > lo);
  const std::string budget = " --set train.memory_budget_gb=" + fmt::format("{:.9f}", (lo + hi) / 2 / 1e9);
  auto predicted = test::run_trainer("check " + cfg + " --memory" + pp2 + budget);
  INFO(predicted.output);
  REQUIRE(predicted.exit_code == 0);
  CHECK(predicted.output.find("train.batch_size auto would pick micro-batch 8 x 2 accumulation") != std::string::npos);
  auto run = test::run_trainer("launch -n 2 -- run " + cfg + pp2 + budget + " --out-dir " + (dir / "auto").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("train.batch_size auto: micro-batch 8 x 2 accumulation x 1 rank(s) = global batch 16; the "
                        "pipeline's 8 microbatches of 2 a step") != std::string::npos);
  CHECK(test::read_file(dir / "auto/auto/logs/rank1.log").find("micro-batch 8 x 2 accumulation") != std::string::npos);
  // no line gives a microbatch count before the pick (they said 1, found from outside)
  CHECK(run.output.find(" 1 microbatches a batch") == std::string::npos);
  CHECK(run.output.find("the microbatches a batch follow train.batch_size auto's pick") != std::string::npos);
  CHECK(run.output.find("1f1b, 4 microbatches a batch") != std::string::npos);  // micro-batch 8 in microbatches of 2
  auto fixed = test::run_trainer("launch -n 2 -- run " + cfg + pp2 + " --set train.batch_size=8 --out-dir " +
                                 (dir / "fixed").string());
  INFO(fixed.output);
  REQUIRE(fixed.exit_code == 0);
  const auto a = test::train_losses(dir / "auto/auto/metrics.jsonl"), b = test::train_losses(dir / "fixed/auto/metrics.jsonl");
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (int64_t s = 1; s <= 4; ++s) {
    INFO("step " << s);
    CHECK(a.at(s) == b.at(s));  // the same micro-batch, the same schedule: the same arithmetic
  }
}

// A first stage with nothing to train (train.freeze of the embeddings and block 0: fine-tuning the top
// of a model) builds no graph: its backward has nothing to do and nothing to send, under 1F1B and
// under zero bubble's split backward alike.
TEST_CASE("pp 2 with the whole first stage frozen logs one process's losses", "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_frozen_stage");
  auto cfg = test::write_tiny_gpt_config(dir).string();  // stage 0: units 0-1 (embeddings, h.0)
  const std::string freeze = " --set train.freeze=[wte,wpe,h\\.0\\.]";
  auto single = one_process(cfg, dir, freeze);
  for (const std::string sched : {"1f1b", "zero_bubble"}) {
    auto pp = launched(2, cfg, freeze + " --set dist.pipeline_parallel=2 --set dist.pipeline.schedule=" + sched,
                       dir / sched);
    test::tp2d::require_trained(pp, test::tp2d::kSteps, 2);
    CHECK(pp.output.find("stage 0 (units 0-1) on pp rank 0 of 2") != std::string::npos);
    test::tp2d::check_same_losses(single, pp, sched.c_str());
  }
}

// Early stopping decides on the evaluation's loss, which every pp rank receives from the last stage:
// the ranks stop together, at one process's step.
TEST_CASE("pp 2: early stopping stops every rank at one process's step", "[dist][e2e][pp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("pp_early_stop");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  // the first evaluation (step 2) is the best; the second (step 4) cannot improve on it by 100
  const std::string stop = " --set train.eval_every=2 --set train.early_stopping.metric=loss "
                           "--set train.early_stopping.patience=1 --set train.early_stopping.min_delta=100";
  auto single = test::train_tiny_gpt("", "run " + cfg + kPpArgs + stop, dir / "single");
  auto pp = launched(2, cfg, stop + " --set dist.pipeline_parallel=2", dir / "pp");
  for (const auto* run : {&single, &pp}) {
    INFO(run->output);
    REQUIRE(run->exit_code == 0);
    CHECK(run->output.find("early stopping at step 4: loss has not improved for 1 evaluations") != std::string::npos);
    CHECK(run->losses.size() == 4);
  }
  for (size_t i = 0; i < 4 && i < pp.losses.size(); ++i) CHECK(std::abs(pp.losses[i] - single.losses[i]) <= 1e-6 * single.losses[i]);
  // rank 1 stopped there too, not only rank 0 (its log is its own)
  CHECK(test::read_file(dir / "pp" / "tiny" / "logs" / "rank1.log").find("early stopping at step 4") != std::string::npos);
}
