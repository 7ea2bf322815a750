// Milestones (engine/loop/milestones.hpp): the steps that save and evaluate, early stopping's answer,
// and the end's evaluation and final checkpoint made once (as after a regroup during the end).
#include <catch2/catch.hpp>

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
  REQUIRE_FALSE(run.ckpt.resume(engine::ResumeOptions{engine::ResumeMode::Never}).has_value());  // opens the store
  std::vector<int64_t> evaluated;
  Milestones m(run.cfg, [&](int64_t step) {
    evaluated.push_back(step);
    return false;
  });
  for (int64_t step = 1; step <= 8; ++step) CHECK_FALSE(m.after_step(step, /*last=*/false, run.ckpt));
  CHECK(evaluated == std::vector<int64_t>{3, 6});
  CHECK(run.saved_steps() == std::vector<int64_t>{4, 8});
  // the run's last step: the end saves and evaluates it, not the periodic schedule
  CHECK_FALSE(m.after_step(9, /*last=*/true, run.ckpt));
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
  REQUIRE_FALSE(run.ckpt.resume(engine::ResumeOptions{engine::ResumeMode::Never}).has_value());
  std::vector<int64_t> evaluated;
  Milestones m(run.cfg, [&](int64_t step) {
    evaluated.push_back(step);
    return step == 6;
  });
  for (int64_t step = 1; step <= 5; ++step) CHECK_FALSE(m.after_step(step, /*last=*/false, run.ckpt));
  CHECK(m.after_step(6, /*last=*/false, run.ckpt));
  m.at_end(6, run.ckpt);
  CHECK(evaluated == std::vector<int64_t>{3, 6});
  CHECK(run.saved_steps() == std::vector<int64_t>{4, 6});
}
