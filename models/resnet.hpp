// ResNet as torchvision builds it (depths 18/34/50/101/152: BasicBlock / Bottleneck with the stride
// on the 3x3 conv), with torchvision's parameter and buffer names, plus He et al.'s CIFAR layout
// (depth 6n+2: three stages of n BasicBlocks, 16/32/64 channels). 50 and 152 are both torchvision
// and 6n+2 depths: they are torchvision's, so the CIFAR layout covers 8, 14, 20, 26, 32, 38, 44, 56, ...
#pragma once

#include "models/model.hpp"

namespace trainer::models {

// One residual block; conv/bn children are registered under torchvision's names.
class ResidualBlock : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;  // (B, Cin, H, W) -> (B, Cout, H/s, W/s)
  // Forward FLOPs (2 per multiply-add) of the convolutions for an h x w input; h and w become the output size.
  virtual double forward_flops(int64_t& h, int64_t& w) const = 0;
  virtual void zero_init_last_bn() = 0;  // zero_init_residual: each block starts as the identity
};

class ResNet : public Model {
 public:
  explicit ResNet(const config::ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x) override;  // (B, C, H, W) -> (B, num_classes)
  InputKind input_kind() const override { return InputKind::Image; }
  std::string arch() const override { return "resnet"; }
  double train_flops_per_sample(const std::vector<int64_t>& sample_shape) const override;
  std::vector<ModelUnit> units() const override;  // stem, layer1.., head
  bool gates_units() const override { return true; }

 private:
  torch::Tensor run_stage(size_t i, torch::Tensor x);
  void to_channels_last();

  config::ModelConfig cfg_;
  bool imagenet_stem_ = true;  // 7x7/2 conv + 3x3/2 max-pool; false: 3x3/1 conv, no pool
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<torch::nn::ModuleList> stages_;                      // layer1, layer2, ...
  std::vector<std::vector<std::shared_ptr<ResidualBlock>>> blocks_;  // the same blocks, typed
  torch::nn::Linear fc_{nullptr};
};

ModelSpec resnet_spec();

}  // namespace trainer::models
