// The training recipes through the real binary: a run with label smoothing, EMA, mixup/cutmix,
// RandomResizedCrop and colour jitter resumes bitwise like the uninterrupted run (EMA weights
// included), EMA leaves the training itself unchanged, and `trainer export --ema` writes the EMA.
#include <catch2/catch.hpp>

#include <filesystem>

#include "ckpt_runs.hpp"
#include "io/safetensors.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using trainer::test::run_trainer;
using trainer::test::train_losses;

namespace {

// A tiny RGB ResNet on synthetic images with every image recipe on; `ema` is the train.ema entry.
std::string recipes_config(const std::string& name, const std::string& ema) {
  return "run: {name: " + name + ", out_dir: runs, seed: 3, deterministic: true}\n"
         "model: {arch: resnet, depth: 8, stem: cifar, in_channels: 3, num_classes: 4, width: 0.25}\n"
         "data: {format: synthetic, workers: 2, synthetic: {num_samples: 96, val_samples: 32, image_size: 12},\n"
         "       augment: {random_resized_crop: true, hflip: true, brightness: 0.3, contrast: 0.3, saturation: 0.3,\n"
         "                 hue: 0.05},\n"
         "       mixup: {alpha: 0.4, prob: 0.9}, cutmix: {alpha: 1.0}}\n"
         "train: {batch_size: 8, grad_accum: 2, max_steps: 12, log_every: 1, eval_every: 4, threads: 1,\n"
         "        label_smoothing: 0.1" + (ema.empty() ? "" : ", ema: " + ema) + "}\n"
         "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
         "log: {progress: off}\n"
         "checkpoint: {every_steps: 4, keep_last: 10}\n";
}

void check_same_tensors(const fs::path& a, const fs::path& b) {
  auto ta = trainer::io::load_safetensors(a.string()), tb = trainer::io::load_safetensors(b.string());
  REQUIRE(ta.tensors.size() == tb.tensors.size());
  for (size_t i = 0; i < ta.tensors.size(); ++i) {
    INFO(a.string() << ": " << ta.tensors[i].first);
    CHECK(ta.tensors[i].first == tb.tensors[i].first);
    CHECK(torch::equal(ta.tensors[i].second, tb.tensors[i].second));
  }
}

// Run b (dir/b.yaml) from a copy of run a's step-4 checkpoint: it resumes there and finishes.
void resume_b_from_step4(const fs::path& dir) {
  fs::create_directories(dir / "runs/b/checkpoints");
  fs::copy(dir / "runs/a/checkpoints/step-4", dir / "runs/b/checkpoints/step-4", fs::copy_options::recursive);
  auto b = run_trainer("run " + (dir / "b.yaml").string());
  INFO(b.output);
  REQUIRE(b.exit_code == 0);
  REQUIRE(b.output.find("resumed from ") != std::string::npos);
}

}  // namespace

TEST_CASE("recipes: a resumed run with smoothing, EMA, mixup/cutmix, RRC and jitter equals the uninterrupted one",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("recipes_resume");
  const std::string ema = "{decay: 0.8, every: 2, eval: true}";
  trainer::test::write_file(dir / "a.yaml", recipes_config("a", ema));
  trainer::test::write_file(dir / "b.yaml", recipes_config("b", ema));
  trainer::test::write_file(dir / "c.yaml", recipes_config("c", ""));
  auto a = run_trainer("run " + (dir / "a.yaml").string());
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const auto ckpts_a = dir / "runs/a/checkpoints";
  REQUIRE(fs::exists(ckpts_a / "step-4" / "ema.safetensors"));

  resume_b_from_step4(dir);

  auto la = train_losses(dir / "runs/a/metrics.jsonl"), lb = train_losses(dir / "runs/b/metrics.jsonl");
  REQUIRE(la.size() == 12);
  REQUIRE(lb.size() == 8);
  for (int64_t s = 5; s <= 12; ++s) {
    INFO("step " << s);
    CHECK(lb.at(s) == la.at(s));  // bitwise: mixing, augmentation and smoothing continue exactly
  }
  check_same_tensors(ckpts_a / "step-12/model.safetensors", dir / "runs/b/checkpoints/step-12/model.safetensors");
  check_same_tensors(ckpts_a / "step-12/ema.safetensors", dir / "runs/b/checkpoints/step-12/ema.safetensors");

  // the EMA is evaluated beside the trained weights, and is not a copy of them
  auto eval_a = trainer::test::records(dir / "runs/a/metrics.jsonl", "eval");
  auto eval_b = trainer::test::records(dir / "runs/b/metrics.jsonl", "eval");
  REQUIRE(eval_a.size() == 3);  // steps 4, 8, 12
  REQUIRE(eval_b.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(eval_b[i].at("ema_loss") == eval_a[i + 1].at("ema_loss"));
    CHECK(eval_b[i].at("ema_accuracy") == eval_a[i + 1].at("ema_accuracy"));
  }
  CHECK(eval_a.back().at("ema_loss") != eval_a.back().at("loss"));

  // EMA off: the very same training (the shadow's construction draws nothing from the run's generators)
  auto c = run_trainer("run " + (dir / "c.yaml").string());
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  auto lc = train_losses(dir / "runs/c/metrics.jsonl");
  REQUIRE(lc.size() == 12);
  for (int64_t s = 1; s <= 12; ++s) CHECK(lc.at(s) == la.at(s));
  CHECK_FALSE(fs::exists(dir / "runs/c/checkpoints/step-12/ema.safetensors"));
  CHECK_FALSE(trainer::test::records(dir / "runs/c/metrics.jsonl", "eval").back().contains("ema_loss"));

  // export --ema writes the EMA weights; a checkpoint without them is refused
  auto ex = run_trainer("export " + (ckpts_a / "step-12").string() + " --ema --out " + (dir / "ema.safetensors").string());
  INFO(ex.output);
  REQUIRE(ex.exit_code == 0);
  auto exported = trainer::io::load_safetensors((dir / "ema.safetensors").string());
  CHECK(exported.metadata.at("weights") == "ema");
  auto saved = trainer::io::load_safetensors((ckpts_a / "step-12/ema.safetensors").string());
  std::map<std::string, torch::Tensor> by_name(saved.tensors.begin(), saved.tensors.end());
  REQUIRE(exported.tensors.size() == saved.tensors.size());
  for (auto& [name, t] : exported.tensors) CHECK(torch::equal(t, by_name.at(name)));
  auto none = run_trainer("export " + (dir / "runs/c/checkpoints/step-12").string() + " --ema --out " +
                          (dir / "none.safetensors").string());
  CHECK(none.exit_code == 1);
  CHECK(none.output.find("ema.safetensors: missing: this checkpoint holds no EMA weights") != std::string::npos);
}

// train.ema.lookahead writes the average into the weights: its shadow is training state, checkpointed
// between updates (step 4 of every 5 here) and restored exactly.
TEST_CASE("recipes: a resumed lookahead run equals the uninterrupted one and ends on the average", "[e2e]") {
  auto dir = trainer::test::scratch_dir("lookahead_resume");
  const std::string la = "{decay: 0.77, every: 5, lookahead: true}";
  trainer::test::write_file(dir / "a.yaml", recipes_config("a", la));
  trainer::test::write_file(dir / "b.yaml", recipes_config("b", la));
  trainer::test::write_file(dir / "c.yaml", recipes_config("c", ""));
  for (const char* name : {"a", "c"}) {
    auto r = run_trainer("run " + (dir / (std::string(name) + ".yaml")).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
  const auto ckpts_a = dir / "runs/a/checkpoints";
  resume_b_from_step4(dir);

  auto la_l = train_losses(dir / "runs/a/metrics.jsonl"), lb = train_losses(dir / "runs/b/metrics.jsonl");
  auto lc = train_losses(dir / "runs/c/metrics.jsonl");
  REQUIRE(la_l.size() == 12);
  REQUIRE(lb.size() == 8);
  REQUIRE(lc.size() == 12);
  for (int64_t s = 5; s <= 12; ++s) {
    INFO("step " << s);
    CHECK(lb.at(s) == la_l.at(s));  // bitwise: the shadow saved at step 4 (the weights of step 0) continues
  }
  for (int64_t s = 1; s <= 5; ++s) CHECK(la_l.at(s) == lc.at(s));  // the first update follows step 5
  CHECK(la_l.at(6) != lc.at(6));  // ... and moved the weights (decay 0.77 x (5/12)^3 = 0.056)
  check_same_tensors(ckpts_a / "step-12/model.safetensors", dir / "runs/b/checkpoints/step-12/model.safetensors");
  // step 12 is no multiple of 5, but the last: the weights are the average
  check_same_tensors(ckpts_a / "step-12/model.safetensors", ckpts_a / "step-12/ema.safetensors");
  auto s4 = trainer::io::load_safetensors((ckpts_a / "step-4/ema.safetensors").string());
  auto m4 = trainer::io::load_safetensors((ckpts_a / "step-4/model.safetensors").string());
  bool differs = false;
  for (size_t i = 0; i < s4.tensors.size(); ++i) differs |= !torch::equal(s4.tensors[i].second, m4.tensors[i].second);
  CHECK(differs);  // between updates the shadow is not the weights: it had to be saved
}
