// A small VGG-style ConvNet for small images, after airbench's CIFAR-10 net (Keller Jordan's speedruns):
// a 3x3 stem conv, then three blocks of conv -> 2x2 max-pool -> BN -> GELU -> conv -> BN -> GELU, a global
// max-pool and a bias-free linear head. Each block halves the image, so a 28x28 Fashion-MNIST image meets
// the wide layers at 14, 7 and 3 pixels: less than half the old quickstart ResNet's step, a better score
// (docs/PERFORMANCE.md, "Time to accuracy"). Widths 24-32-64-128 times model.width. PyTorch's default
// initialisation, so `scripts/bench/ref_models.py`'s ConvNet draws the same weights for the same seed.
#pragma once

#include "models/model.hpp"

namespace trainer::models {

class ConvNet : public Model {
 public:
  static constexpr int64_t kBlocks = 3;
  static constexpr int64_t kWhitenImages = 5000;  // model.whiten's covariance: the first 5000 training images (airbench's)
  explicit ConvNet(const config::ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x) override;  // (B, C, H, W) -> (B, num_classes)
  InputKind input_kind() const override { return InputKind::Image; }
  std::string arch() const override { return "convnet"; }
  double train_flops_per_sample(const std::vector<int64_t>& sample_shape) const override;
  std::vector<ModelUnit> units() const override;  // stem, block1..3, head
  bool gates_units() const override { return true; }
  int64_t data_init_samples() const override;  // model.whiten: kWhitenImages, else 0
  void init_from_data(const torch::Tensor& images) override;

 private:
  torch::Tensor run_block(size_t i, const torch::Tensor& x);
  int64_t stem_channels() const;  // what block 1 reads: the stem's width, or the whitening's 2 C k^2

  config::ModelConfig cfg_;
  torch::nn::Conv2d stem_{nullptr};  // model.whiten 0: a learned 3x3 conv with bias
  torch::Tensor whiten_;              // model.whiten k: the frozen (2 C k^2, C, k, k) whitening filters (buffer)
  torch::nn::ModuleList blocks_{nullptr};  // blocks.i.{conv1, bn1, conv2, bn2}
  std::vector<torch::nn::Conv2d> conv1_, conv2_;
  std::vector<torch::nn::BatchNorm2d> bn1_, bn2_;
  torch::nn::Linear head_{nullptr};
};

ModelSpec convnet_spec();

// The channel widths model.width gives: stem, then each block's (rounded, at least 1).
std::vector<int64_t> convnet_widths(double width);

}  // namespace trainer::models
