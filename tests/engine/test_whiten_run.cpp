// model.whiten end to end: a fresh `trainer run` computes the ConvNet's whitening filters from the
// training images (the ones models/whitening.hpp gives for the dataset's own samples), saves them with
// the weights, keeps them frozen, and a resumed run takes them from its checkpoint.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "io/safetensors.hpp"
#include "models/whitening.hpp"
#include "test_util.hpp"

using namespace trainer;

namespace {

const char* kWhitenRun = R"(run: {name: whiten, seed: 0}
model: {arch: convnet, width: 0.5, in_channels: 3, num_classes: 4, whiten: 2}
data: {format: synthetic, workers: 1, synthetic: {num_samples: 384, val_samples: 64, image_size: 12}}
train: {batch_size: 16, max_steps: 30, log_every: 10, eval_every: 0, device: cpu, threads: 1, precision: fp32}
optim: {name: sgd, lr: 0.05, momentum: 0.9}
checkpoint: {every_steps: 15, keep_last: 5}
log: {progress: off}
)";

// the tensor "whiten" of a checkpoint's file (model.safetensors, ema.safetensors)
torch::Tensor whiten_in(const std::filesystem::path& file) {
  for (const auto& [name, t] : io::load_safetensors(file.string()).tensors)
    if (name == "whiten") return t;
  FAIL("no tensor whiten in " << file);
  return {};
}
torch::Tensor whiten_at(const std::filesystem::path& step_dir) { return whiten_in(step_dir / "model.safetensors"); }

// what the run computes from: every training sample (fewer than 5000), unaugmented, in order
torch::Tensor expected_whitening() {
  config::RunConfig cfg;
  cfg.model.arch = "convnet";
  cfg.model.in_channels = 3;
  cfg.model.num_classes = 4;
  cfg.data.format = config::DataFormat::Synthetic;
  cfg.data.synthetic = {.num_samples = 384, .val_samples = 64, .image_size = 12};
  const auto data = data::create_datasets(cfg.data, cfg.model, 0);
  std::vector<torch::Tensor> images;
  for (int64_t i = 0; i < data.train->size(); ++i) images.push_back(data.train->get(i, 0, false).input);
  return models::whitening_weight(torch::stack(images), 2);
}

}  // namespace

TEST_CASE("model.whiten: a fresh run computes the filters from its training images, keeps them frozen, a resume "
          "reads them back",
          "[e2e]") {
  const auto dir = test::scratch_dir("e2e_whiten");
  test::write_file(dir / "w.yaml", kWhitenRun);
  const auto runs = dir / "runs";
  auto r = test::run_trainer("run " + (dir / "w.yaml").string() + " --out-dir " + runs.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("model.convnet: weights computed from the first 384 training images") != std::string::npos);
  const auto ckpts = runs / "whiten/checkpoints";
  const auto want = expected_whitening();
  CHECK(torch::equal(whiten_at(ckpts / "step-15"), want));
  CHECK(torch::equal(whiten_at(ckpts / "step-30"), want));  // frozen: no optimizer step moved it

  auto resumed = test::run_trainer("run " + (dir / "w.yaml").string() + " --out-dir " + runs.string() +
                                   " --set train.max_steps=45 --resume auto");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("weights computed from") == std::string::npos);
  CHECK(torch::equal(whiten_at(ckpts / "step-45"), want));
}
