// train.eval_tta flip: an evaluation also scores each image by the mean of its logits and its
// mirror's, beside the plain figures (never instead of them); both checked against the same model's
// logits computed here, batch by batch, on the validation images.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "dist/launch_env.hpp"
#include "engine/eval/evaluator.hpp"
#include "engine/startup/finetune.hpp"
#include "eval_runs.hpp"

using namespace trainer;

TEST_CASE("train.eval_tta flip: the loss and accuracy of the mean logits of each image and its mirror, beside the "
          "plain ones",
          "[engine]") {
  auto cfg = test::tiny_resnet_eval_config(64, 40, 16);  // the last batch holds 8
  cfg.train.eval_tta = "flip";
  const torch::Device cpu(torch::kCPU);
  torch::manual_seed(5);
  auto model = engine::build_run_model(cfg, cpu);
  auto data = data::create_datasets(cfg.data, cfg.model, 0);
  REQUIRE(data.val);
  const auto setup = engine::run_eval_setup(cfg, dist::LaunchEnv{}, engine::Precision::Fp32, cpu, /*tokens=*/false);
  REQUIRE(setup.flip_tta);
  auto plain_setup = setup;
  plain_setup.flip_tta = false;
  const auto tta = engine::Evaluator(data.val, setup, nullptr, 1).run(*model);
  const auto plain = engine::Evaluator(data.val, plain_setup, nullptr, 1).run(*model);

  // the reference: the validation images in order, through the model in eval mode, in the loader's batches
  torch::NoGradGuard no_grad;
  model->eval();
  double loss_sum = 0, plain_sum = 0;
  int64_t right = 0, n = 0;
  for (int64_t start = 0; start < data.val->size(); start += cfg.train.batch_size) {
    std::vector<torch::Tensor> xs, ys;
    for (int64_t i = start; i < std::min(start + cfg.train.batch_size, data.val->size()); ++i) {
      auto e = data.val->get(i, 0, /*augment=*/false);
      xs.push_back(e.input);
      ys.push_back(e.target);
    }
    auto x = torch::stack(xs), y = torch::stack(ys);
    auto once = model->forward(x);
    auto mean = (once + model->forward(x.flip({-1}))) * 0.5;
    loss_sum += torch::nn::functional::cross_entropy(mean, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
    plain_sum += torch::nn::functional::cross_entropy(once, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
    right += mean.argmax(1).eq(y).sum().item<int64_t>();
    n += x.size(0);
  }
  REQUIRE(tta.count == n);
  REQUIRE(tta.tta_loss);
  REQUIRE(tta.tta_accuracy);
  CHECK(*tta.tta_loss == Approx(loss_sum / static_cast<double>(n)).epsilon(1e-5));
  CHECK(*tta.tta_accuracy == Approx(static_cast<double>(right) / static_cast<double>(n)).margin(1e-12));
  // the plain figures stay the plain model's, with or without the option
  CHECK(tta.loss == Approx(plain_sum / static_cast<double>(n)).epsilon(1e-5));
  CHECK(tta.loss == plain.loss);
  CHECK(tta.accuracy == plain.accuracy);
  CHECK_FALSE(plain.tta_loss);
  CHECK(std::abs(*tta.tta_loss - tta.loss) > 1e-6);  // the mirror changed what was scored
}
