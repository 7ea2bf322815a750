// Checkpoints free of layout and the ViT at 2-D (issue 24). A checkpoint written at (dp 2, tp 2,
// dist.sharding full) holds the global tensors, so it resumes at tp 4, at dp 4 (fully sharded) and in
// one process, each continuing the uninterrupted one-process run within 1e-6 relative, and what one
// layout saves another loads and saves again bit for bit. The ViT at
// dp 2 x tp 2, replicated and fully sharded over dp, logs the losses of one process at the same
// global batch.
#include <catch2/catch.hpp>

#include <map>

#include <fmt/format.h>

#include "ckpt/ckpt_runs.hpp"
#include "io/tensor_parts.hpp"
#include "spawn.hpp"
#include "tp2d_runs.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace tp_layouts {  // named: the unity build joins the dist tests

using namespace test::tp2d;

TEST_CASE("a (dp 2, tp 2, full) checkpoint resumes at tp 4, at dp 4 fully sharded and in one process, each "
          "continuing the uninterrupted run",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_layouts_resume");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  // 4 heads (of width 8), so that tp 4 splits them; every run at the global batch 16
  const std::string args = kArgs + " --set model.n_head=4";
  auto single = test::train_tiny_gpt("", "run " + cfg + args + " --set train.batch_size=16", dir / "single");
  require_trained(single, kSteps, 1);

  auto first = test::train_tiny_gpt("", k2d + cfg + args + kTp2 +
                                            " --set dist.sharding=full --set train.batch_size=8 --set train.max_steps=5",
                                    dir / "a");
  require_trained(first, 5, 4);
  const auto ckpt = (dir / "a" / "tiny" / "checkpoints" / "step-5").string();

  struct Layout {
    const char* name;
    std::string command;  // what resumes the checkpoint
    const char* says;     // the resume's log line: the checkpoint's dp ranks on this run's
  };
  const std::vector<Layout> layouts = {
      {"tp 4", k2d + cfg + args + " --set dist.tensor_parallel=4 --set train.batch_size=16",
       "resuming a checkpoint of 2 data-parallel ranks on 1"},
      {"dp 4, full", k2d + cfg + args + " --set dist.sharding=full --set train.batch_size=4",
       "resuming a checkpoint of 2 rank(s) on 4"},
      {"one process", "run " + cfg + args + " --set train.batch_size=16", "resuming a checkpoint of 2 rank(s) on 1"},
  };
  for (const auto& l : layouts) {
    const auto out = dir / (std::string("b_") + std::to_string(&l - layouts.data()));
    // (its metrics start at step 6: not train_tiny_gpt, which reads a run from step 1)
    auto rest = test::run_trainer(l.command + " --resume " + ckpt + " --out-dir " + out.string());
    INFO(l.name << "\n" << rest.output);
    REQUIRE(rest.exit_code == 0);
    CHECK(rest.output.find(l.says) != std::string::npos);
    // the resumed run logs steps 6-10 only
    const auto losses = test::train_losses(out / "tiny" / "metrics.jsonl");
    REQUIRE(losses.size() == 5);
    double worst = 0;
    for (const auto& [step, loss] : losses) {
      INFO(l.name << ", step " << step << ": " << loss << " vs " << single.losses[step - 1]);
      REQUIRE(step > 5);
      const double rel = std::abs(loss - single.losses[step - 1]) / std::abs(single.losses[step - 1]);
      worst = std::max(worst, rel);
      CHECK(rel <= kRel);
    }
    WARN("(dp 2, tp 2, full) -> " << l.name << ": largest relative loss difference over steps 6-10 " << worst);
  }
}

// Save at layout A, load at layout B, save at B: B's checkpoint holds A's global tensors bit for bit,
// the weights and AdamW's moments and step counts, for every pair of five layouts. B saves before its
// first step: TRAINER_INJECT_SIGNAL=3 stops it at the boundary it resumed at, and a run resumed from
// another run's folder saves that state into its own (the save a preemption there makes). So what B
// writes is what it loaded, sliced over its mesh (and its dp shards) and gathered again. The
// vocabulary of 30 pads to 32 at tp 4 and stays 30 at tp 2: the padding must never reach a file.
TEST_CASE("save at layout A, load at layout B, save at B: the weights and optimizer state bit for bit for every "
          "pair of one process, tp 2, dp 2 x tp 2 full, tp 4 and dp 4 full",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_layouts_pairs");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string args = kArgs + " --set model.n_head=4 --set model.vocab_size=30";
  struct Layout {
    std::string name, command;  // the command up to the config's options
  };
  const std::vector<Layout> layouts = {
      {"one process", "run " + cfg + args + " --set train.batch_size=16"},
      {"tp 2", "launch -n 2 -- run " + cfg + args + kTp2 + " --set train.batch_size=16"},
      {"dp 2 x tp 2 full", k2d + cfg + args + kTp2 + " --set dist.sharding=full --set train.batch_size=8"},
      {"tp 4", k2d + cfg + args + " --set dist.tensor_parallel=4 --set train.batch_size=16"},
      {"dp 4 full", k2d + cfg + args + " --set dist.sharding=full --set train.batch_size=4"},
  };
  auto ckpt = [](const std::filesystem::path& out, int step) {
    return out / "tiny" / "checkpoints" / fmt::format("step-{}", step);
  };
  for (size_t a = 0; a < layouts.size(); ++a) {
    const auto out = dir / fmt::format("a{}", a);
    auto r = test::run_trainer(layouts[a].command + " --set train.max_steps=3 --out-dir " + out.string());
    INFO(layouts[a].name << "\n" << r.output);
    REQUIRE(r.exit_code == 0);
    REQUIRE(std::filesystem::exists(ckpt(out, 3) / "manifest.json"));
  }
  for (size_t a = 0; a < layouts.size(); ++a)
    for (size_t b = 0; b < layouts.size(); ++b) {
      const auto from = ckpt(dir / fmt::format("a{}", a), 3);
      const auto out = dir / fmt::format("b{}{}", a, b);
      const std::string what = layouts[a].name + " -> " + layouts[b].name;
      auto r = test::run_trainer(layouts[b].command + " --set train.max_steps=6 --resume " + from.string() +
                                     " --out-dir " + out.string(),
                                 "TRAINER_INJECT_SIGNAL=3");
      INFO(what << "\n" << r.output);
      REQUIRE(r.exit_code == 75);
      CHECK(r.output.find("saving the state it resumed from another folder into this run's, at step 3") !=
            std::string::npos);
      check_identical_tensors(from, ckpt(out, 3), what);
      check_identical_optimizer_state(from, ckpt(out, 3), what);
    }
}

TEST_CASE("the ViT at dp 2 x tp 2, replicated and fully sharded over dp, logs the losses of one process at the same "
          "global batch",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_layouts_vit");
  test::write_file(dir / "tiny_vit.yaml", kTinyVitYaml);
  const auto cfg = (dir / "tiny_vit.yaml").string();
  auto single = test::train_tiny_gpt("", "run " + cfg + kArgs + " --set train.batch_size=16", dir / "single");
  require_trained(single, kSteps, 1);
  CHECK(std::abs(single.losses.back() - single.losses.front()) > 1e-3);  // it trains
  for (const std::string sharding : {"none", "full"}) {
    auto mesh = test::train_tiny_gpt(
        "", k2d + cfg + kArgs + kTp2 + " --set train.batch_size=8 --set dist.sharding=" + sharding, dir / sharding);
    require_trained(mesh, kSteps, 4);
    CHECK(mesh.output.find("tensor parallel 2 (data parallel 2") != std::string::npos);
    check_same_losses(single, mesh, ("ViT dp 2 x tp 2, sharding " + sharding).c_str());
    check_same_grad_norms(dir / "single", dir / sharding, ("ViT, sharding " + sharding).c_str());
  }
}

// The longer bound: over 30 AdamW steps with grad_clip the rounding of other reduction orders
// compounds, so 1e-4 relative (10 steps: 1e-6, the other tests). GPT at tp 2, with sequence parallel,
// the ViT at tp 2; and train.freeze at tp 2 (frozen slices take no gradient, no optimizer state).
TEST_CASE("30 AdamW steps at tp 2 (GPT, with sequence parallel, ViT) stay within 1e-4 of one process, and train.freeze "
          "at tp 2 logs one process's losses",
          "[dist][e2e][tp]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("tp_layouts_long");
  auto gpt = test::write_tiny_gpt_config(dir).string();
  test::write_file(dir / "tiny_vit.yaml", kTinyVitYaml);
  const auto vit = (dir / "tiny_vit.yaml").string();
  const std::string thirty = kArgs + " --set train.max_steps=30 --set train.batch_size=16";
  struct Case {
    std::string name, cfg, extra;
  };
  const std::vector<Case> cases = {{"GPT", gpt, ""},
                                   {"GPT, sequence parallel", gpt, " --set dist.sequence_parallel=true"},
                                   {"ViT", vit, ""}};
  for (const auto& c : cases) {
    const auto tag = std::to_string(&c - cases.data());
    auto single = test::train_tiny_gpt("", "run " + c.cfg + thirty, dir / ("one" + tag));
    require_trained(single, 30, 1);
    auto tp = test::train_tiny_gpt("", "launch -n 2 -- run " + c.cfg + thirty + kTp2 + c.extra, dir / ("tp" + tag));
    require_trained(tp, 30, 2);
    double worst = 0;
    for (size_t i = 0; i < 30; ++i) {
      INFO(c.name << ", step " << i + 1 << ": " << single.losses[i] << " vs " << tp.losses[i]);
      const double rel = std::abs(single.losses[i] - tp.losses[i]) / std::abs(single.losses[i]);
      worst = std::max(worst, rel);
      CHECK(rel <= 1e-4);
    }
    WARN(c.name << " at tp 2 over 30 steps: largest relative loss difference " << worst);
  }

  // the first block's attention frozen (its c_attn and c_proj slices): the same losses as one process
  const std::string freeze = kArgs + " --set train.batch_size=16 --set train.freeze=['h\\.0\\.attn']";
  auto single = test::train_tiny_gpt("", "run " + gpt + freeze, dir / "freeze_one");
  require_trained(single, kSteps, 1);
  auto tp = test::train_tiny_gpt("", "launch -n 2 -- run " + gpt + freeze + kTp2, dir / "freeze_tp");
  require_trained(tp, kSteps, 2);
  check_same_losses(single, tp, "tp 2 with train.freeze");
  auto unfrozen = test::train_tiny_gpt("", "run " + gpt + kArgs + " --set train.batch_size=16", dir / "unfrozen");
  require_trained(unfrozen, kSteps, 1);
  CHECK(std::abs(unfrozen.losses.back() - single.losses.back()) > 1e-5);  // the freeze changed the run
}

}  // namespace tp_layouts
