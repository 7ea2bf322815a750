// The model interface the engine trains, and the registry that builds a model from model.arch.
// Parameter and buffer names equal torchvision's / nanoGPT's, so weights move to and from PyTorch as
// safetensors files (io/safetensors.hpp) without renaming.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace trainer::models {

enum class InputKind { Image, Tokens };

class Model : public torch::nn::Module {
 public:
  // Image: (B, C, H, W) float -> logits (B, num_classes). Tokens: (B, T) int64 -> logits (B, T, vocab).
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  virtual InputKind input_kind() const = 0;
  virtual std::string arch() const = 0;  // "resnet" | "gpt" | "vit"
  // Training FLOPs (forward + backward, ~3x forward) for ONE sample of the given shape: images (C, H, W),
  // tokens (T). For GPT use 6N + 12 * n_layer * T * n_embd per token, times T.
  virtual double train_flops_per_sample(const std::vector<int64_t>& sample_shape) const = 0;
  int64_t num_parameters() const;  // unique parameters (tied weights counted once)
  // train(true) switches every submodule to training mode except those named here, which stay in
  // eval mode (train.freeze_bn: a frozen BatchNorm keeps its running statistics).
  void train(bool on = true) override;
  void keep_in_eval(std::vector<std::shared_ptr<torch::nn::Module>> modules);

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> kept_in_eval_;
};
using ModelPtr = std::shared_ptr<Model>;

class ModelRegistry {
 public:
  using Factory = std::function<ModelPtr(const config::ModelConfig&)>;
  void add(const std::string& arch, Factory factory);
  // Builds the model with its own initialisation (the caller seeds torch first: initialisation draws
  // from torch's generator); model.init is applied apart (models/init_load.hpp), since a resumed run
  // must not read it. Unknown arch: std::invalid_argument listing the known ones.
  ModelPtr create(const config::ModelConfig& cfg) const;
  std::vector<std::string> names() const;  // sorted

 private:
  std::map<std::string, Factory> factories_;
};

// Restrides every 4-d parameter and buffer of `m` to channels-last, in place (set_data). A tensor with
// one channel, such as the stem weight of a 1-channel model, is "contiguous" in both layouts, so
// .contiguous(ChannelsLast) would leave it NCHW-strided; a convolution then suggests NCHW for its
// output and the whole network runs mixed layouts with a copy per conv (PyTorch's
// Module.to(memory_format=...) restrides such tensors too). No-op for tensors already restrided.
void to_channels_last(torch::nn::Module& m);
// True when `t` has channels-last strides (not merely an ambiguous layout that is also NCHW).
bool has_channels_last_strides(const torch::Tensor& t);

// Adds "resnet", "gpt" and "vit".
void register_builtin_models(ModelRegistry& registry);

}  // namespace trainer::models
