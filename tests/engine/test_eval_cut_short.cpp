// An evaluation that a changed data file cuts short (the EMA's pass, after the live weights' pass
// was scored) leaves early stopping's tracker as it was and writes no record: a checkpoint saved then
// says the step is not evaluated, and the evaluation made again on the reopened data counts once.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <atomic>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "dist/launch_env.hpp"
#include "engine/eval/evaluator.hpp"
#include "engine/loop/run_evaluation.hpp"
#include "engine/loop/run_recorder.hpp"
#include "engine/startup/finetune.hpp"
#include "engine/step/ema.hpp"
#include "eval_runs.hpp"
#include "io/run_dir.hpp"
#include "ckpt/ckpt_runs.hpp"

using namespace trainer;

namespace {

// The validation split, whose file "changes" once `reads_left` samples were read: every read after
// that throws DataChanged, as a real file's reader does.
class ChangingSplit final : public data::Dataset {
 public:
  ChangingSplit(std::shared_ptr<data::Dataset> inner, int64_t reads_left) : inner_(std::move(inner)), left_(reads_left) {}
  int64_t size() const override { return inner_->size(); }
  data::SampleKind kind() const override { return inner_->kind(); }
  std::vector<int64_t> sample_shape() const override { return inner_->sample_shape(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  std::string describe() const override { return "changing split"; }
  torch::ScalarType raw_dtype() const override { return inner_->raw_dtype(); }
  std::vector<int64_t> target_shape() const override { return inner_->target_shape(); }
  bool fill(int64_t index, int64_t epoch, bool augment, void* input, int64_t* target) const override {
    if (left_.fetch_sub(1) <= 0) throw data::DataChanged("val.bin", "its size changed");
    return inner_->fill(index, epoch, augment, input, target);
  }
  torch::Tensor finish(const torch::Tensor& raw, bool pin) const override { return inner_->finish(raw, pin); }

 private:
  std::shared_ptr<data::Dataset> inner_;
  mutable std::atomic<int64_t> left_;
};

}  // namespace

TEST_CASE("an evaluation cut short by a changed data file between the live and the EMA pass leaves the tracker "
          "and the records as they were",
          "[engine]") {
  auto cfg = test::tiny_resnet_eval_config(32, 24, 8);
  cfg.train.ema = {.decay = 0.9, .eval = true};
  cfg.log.progress = "off";
  const torch::Device cpu(torch::kCPU);
  torch::manual_seed(5);
  auto model = engine::build_run_model(cfg, cpu);
  auto ema = engine::make_ema(cfg, *model, cpu);
  auto data = data::create_datasets(cfg.data, cfg.model, 0);
  REQUIRE(data.val);
  const auto setup = engine::run_eval_setup(cfg, dist::LaunchEnv{}, engine::Precision::Fp32, cpu, /*tokens=*/false);
  io::RunDir dir{.root = test::scratch_dir("eval_cut_short")};
  const dist::LaunchEnv env;
  engine::RunRecorder records(cfg, env, dir, 10, 1, 0, 0);

  engine::RunEvaluation evaluation(cfg, "loss");
  // the live pass reads all 24 samples; the EMA's pass finds the file changed
  evaluation.set_evaluator(std::make_unique<engine::Evaluator>(std::make_shared<ChangingSplit>(data.val, 24), setup,
                                                               nullptr, 1));
  CHECK_THROWS_AS(evaluation.evaluate(4, 1.0, *model, ema.get(), records), data::DataChanged);
  CHECK(evaluation.tracker().evaluated_step() == -1);
  CHECK_FALSE(evaluation.tracker().best());
  CHECK((!std::filesystem::exists(dir.metrics_file()) || test::records(dir.metrics_file(), "eval").empty()));

  // on the reopened data the step is evaluated once: its record, and the tracker at that step
  evaluation.set_evaluator(std::make_unique<engine::Evaluator>(data.val, setup, nullptr, 1));
  CHECK_FALSE(evaluation.evaluate(4, 1.0, *model, ema.get(), records));
  CHECK(evaluation.tracker().evaluated_step() == 4);
  CHECK(evaluation.tracker().best_step() == 4);
  const auto evals = test::records(dir.metrics_file(), "eval");
  REQUIRE(evals.size() == 1);
  CHECK(evals[0].at("step") == 4);
  CHECK(evals[0].contains("ema_loss"));
}
