// Milestones (engine/loop/milestones.hpp): the steps that save and evaluate, early stopping's answer,
// and the end's evaluation and final checkpoint made once (as after a regroup during the end).
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "config/config.hpp"
#include "engine/checkpoint/checkpoint_manager.hpp"
#include "engine/eval/early_stopping.hpp"
#include "engine/loop/milestones.hpp"
#include "engine/optim/loss_scaler.hpp"
#include "io/checkpoint.hpp"
#include "models/model.hpp"
#include "test_util.hpp"

using namespace trainer;
using engine::Milestones;

namespace {

config::RunConfig milestones_config() {
  config::RunConfig cfg;
  cfg.model.arch = "resnet";
  cfg.model.depth = 8;
  cfg.model.stem = "cifar";
  cfg.model.in_channels = 1;
  cfg.model.num_classes = 4;
  cfg.model.width = 0.25;
  cfg.checkpoint.every_steps = 4;
  cfg.checkpoint.keep_last = 10;
  cfg.train.eval_every = 3;
  return cfg;
}

// The run's objects a CheckpointManager saves, for a tiny model on the CPU (rank 0 of a world of one).
struct SavedRun {
  explicit SavedRun(const config::RunConfig& c) : cfg(c) {}
  std::vector<int64_t> saved_steps() const {
    std::vector<int64_t> steps;
    for (const auto& c : io::step_folders_newest_first(root / "checkpoints")) steps.insert(steps.begin(), c.step);
    return steps;
  }

  config::RunConfig cfg;
  std::filesystem::path root = test::scratch_dir("milestones");
  models::ModelPtr model = models::builtin_models().create(cfg.model);
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1)};
  torch::Device device{torch::kCPU};
  engine::LossScaler scaler{engine::LossScalerConfig{}, device};
  engine::EarlyStopping tracker{cfg.train.early_stopping, "loss"};
  dist::LaunchEnv env;
  engine::CheckpointManager ckpt{cfg, env, nullptr, root, engine::RunObjects{*model, optimizer, scaler, tracker, device},
                                 [](int64_t step) { return engine::RunPosition{step, {}, 1, 0.0}; }};
};

}  // namespace

TEST_CASE("milestones: checkpoint.every_steps and train.eval_every after a step, the end's made once", "[unit]") {
  SavedRun run(milestones_config());
  engine::IntervalTimes times;
  REQUIRE_FALSE(run.ckpt.resume(engine::ResumeOptions{engine::ResumeMode::Never}).has_value());  // opens the store
  std::vector<int64_t> evaluated;
  Milestones m(
      run.cfg,
      [&](int64_t step) {
        evaluated.push_back(step);
        return false;
      },
      [&] { return evaluated.empty() ? int64_t{-1} : evaluated.back(); });
  for (int64_t step = 1; step <= 8; ++step) CHECK_FALSE(m.after_step(step, /*last=*/false, run.ckpt, times));
  CHECK(evaluated == std::vector<int64_t>{3, 6});
  CHECK(run.saved_steps() == std::vector<int64_t>{4, 8});
  // the run's last step: the end saves and evaluates it, not the periodic schedule
  CHECK_FALSE(m.after_step(9, /*last=*/true, run.ckpt, times));
  CHECK(run.saved_steps() == std::vector<int64_t>{4, 8});
  m.at_end(9, run.ckpt);
  CHECK(evaluated == std::vector<int64_t>{3, 6, 9});
  CHECK(run.saved_steps() == std::vector<int64_t>{4, 8, 9});
  // a peer lost during the end: the survivors end the run without evaluating or saving again
  m.at_end(9, run.ckpt);
  CHECK(evaluated == std::vector<int64_t>{3, 6, 9});
  CHECK(run.saved_steps() == std::vector<int64_t>{4, 8, 9});
}

TEST_CASE("milestones: early stopping ends the run at its evaluation, and the end does not evaluate again", "[unit]") {
  SavedRun run(milestones_config());
  engine::IntervalTimes times;
  REQUIRE_FALSE(run.ckpt.resume(engine::ResumeOptions{engine::ResumeMode::Never}).has_value());
  std::vector<int64_t> evaluated;
  Milestones m(
      run.cfg,
      [&](int64_t step) {
        evaluated.push_back(step);
        return step == 6;
      },
      [&] { return evaluated.empty() ? int64_t{-1} : evaluated.back(); });
  for (int64_t step = 1; step <= 5; ++step) CHECK_FALSE(m.after_step(step, /*last=*/false, run.ckpt, times));
  CHECK(m.after_step(6, /*last=*/false, run.ckpt, times));
  m.at_end(6, run.ckpt);
  CHECK(evaluated == std::vector<int64_t>{3, 6});
  CHECK(run.saved_steps() == std::vector<int64_t>{4, 6});
}

namespace {

int64_t saved_evaluated_step(const std::filesystem::path& root, int64_t step) {
  std::ifstream in(root / "checkpoints" / ("step-" + std::to_string(step)) / "state.json");
  return nlohmann::json::parse(in).at("best").at("evaluated_step").get<int64_t>();
}

}  // namespace

TEST_CASE("milestones: a step that evaluates and saves is saved after its evaluation, and a resume at a step saved "
          "before its evaluation makes it once",
          "[unit]") {
  auto cfg = milestones_config();
  cfg.train.eval_every = 4;  // step 4 and 8 evaluate and save
  SavedRun run(cfg);
  engine::IntervalTimes times;
  REQUIRE_FALSE(run.ckpt.resume(engine::ResumeOptions{engine::ResumeMode::Never}).has_value());
  std::vector<int64_t> evaluated;
  auto evaluate = [&](int64_t step) {
    evaluated.push_back(step);
    return run.tracker.update(10.0 - static_cast<double>(step), step);  // the tracker the checkpoint saves
  };
  auto evaluated_step = [&] { return run.tracker.evaluated_step(); };
  Milestones m(run.cfg, evaluate, evaluated_step);
  for (int64_t step = 1; step <= 4; ++step) CHECK_FALSE(m.after_step(step, /*last=*/false, run.ckpt, times));
  // the checkpoint of step 4 holds step 4's evaluation: a run resumed from it does not evaluate it again
  CHECK(saved_evaluated_step(run.root, 4) == 4);
  CHECK(evaluated == std::vector<int64_t>{4});
  CHECK_FALSE(m.at_resume(4, run.ckpt));
  CHECK(evaluated == std::vector<int64_t>{4});
  // a stop signal's checkpoint at step 8 (saved at the boundary, before the evaluation): the tracker
  // restored from it says step 4, so the resumed run evaluates step 8 first; step 9 is no evaluation step
  run.ckpt.save(8, engine::SaveKind::Signal);
  CHECK(saved_evaluated_step(run.root, 8) == 4);
  Milestones resumed(run.cfg, evaluate, evaluated_step);
  CHECK_FALSE(resumed.at_resume(8, run.ckpt));
  CHECK(evaluated == std::vector<int64_t>{4, 8});
  CHECK_FALSE(resumed.at_resume(9, run.ckpt));
  CHECK(evaluated == std::vector<int64_t>{4, 8});
  // it was the best so far: step 8 is saved again, now with its evaluation, and kept as best
  CHECK(saved_evaluated_step(run.root, 8) == 8);
  CHECK(io::CheckpointStore(run.root / "checkpoints", {}).best_step() == std::optional<int64_t>{8});
}

// An evaluation or a save after a step is not the training interval's time: the next record's rates
// are of its steps. An evaluation made the record after it read 8x too slow (found from outside,
// 2026-12-07).
TEST_CASE("milestones: the time of an evaluation and a save is taken out of the training interval", "[unit]") {
  SavedRun run(milestones_config());
  REQUIRE_FALSE(run.ckpt.resume(engine::ResumeOptions{engine::ResumeMode::Never}).has_value());
  engine::Clock::duration eval_time{};
  Milestones m(
      run.cfg,
      [&](int64_t) {
        const auto t0 = engine::Clock::now();
        volatile double x = 0;  // work that takes measurable time
        while (engine::Clock::now() - t0 < std::chrono::milliseconds(30)) x = x + 1;
        eval_time = engine::Clock::now() - t0;
        return false;
      },
      [] { return int64_t{-1}; });
  engine::IntervalTimes times;
  const auto start = times.start;
  CHECK_FALSE(m.after_step(1, /*last=*/false, run.ckpt, times));  // nothing due: moved by its own few microseconds
  const auto unmoved = times.start;
  CHECK(unmoved - start < std::chrono::milliseconds(30));
  CHECK_FALSE(m.after_step(3, /*last=*/false, run.ckpt, times));  // an evaluation
  CHECK(times.start - unmoved >= eval_time);
  const auto before_save = times.start;
  const auto t0 = engine::Clock::now();
  CHECK_FALSE(m.after_step(4, /*last=*/false, run.ckpt, times));  // a save
  CHECK(times.start - before_save > engine::Clock::duration::zero());
  CHECK(times.start - before_save <= engine::Clock::now() - t0);
  CHECK(run.saved_steps() == std::vector<int64_t>{4});
}
