// Helpers for the model tests: configs, deterministic weights (the C++ twin of
// tests/reference/det_fill.py) and comparisons.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "io/safetensors.hpp"
#include "models/model.hpp"

namespace trainer::test {

inline models::ModelPtr make_model(const config::ModelConfig& cfg, int64_t seed = 0) {
  models::ModelRegistry registry;
  models::register_builtin_models(registry);
  torch::manual_seed(seed);
  return registry.create(cfg);
}

inline config::ModelConfig resnet_cfg(int64_t depth, int64_t num_classes = 10) {
  config::ModelConfig c;
  c.arch = "resnet";
  c.depth = depth;
  c.num_classes = num_classes;
  return c;
}

// The reference module of tests/reference/nanogpt_ref.py (GPTConfig defaults).
// The quickstart's ConvNet (widths 24-32-64-128) on 1-channel images.
inline config::ModelConfig convnet_cfg(double width = 1.0, int64_t in_channels = 1) {
  config::ModelConfig cfg;
  cfg.arch = "convnet";
  cfg.width = width;
  cfg.in_channels = in_channels;
  cfg.num_classes = 10;
  return cfg;
}

inline config::ModelConfig tiny_gpt_cfg() {
  config::ModelConfig c;
  c.arch = "gpt";
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  return c;
}

// The small ViT of tests/reference/make_golden.py (VIT): 16x16 RGB images, 4x4 patches.
inline config::ModelConfig tiny_vit_cfg() {
  config::ModelConfig c;
  c.arch = "vit";
  c.in_channels = 3;
  c.num_classes = 10;
  c.image_size = 16;
  c.patch_size = 4;
  c.num_layers = 2;
  c.num_heads = 4;
  c.hidden_dim = 32;
  c.mlp_dim = 64;
  return c;
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

inline std::map<std::string, torch::Tensor> as_map(const io::SafetensorsFile& f) {
  return {f.tensors.begin(), f.tensors.end()};
}

// Same integer hash as det_fill.py: bit-identical values in Python and C++.
inline torch::Tensor det_uniform(const std::string& name, int64_t numel) {
  int64_t seed = 0;
  for (size_t k = 0; k < name.size(); ++k) seed += static_cast<int64_t>(k + 1) * static_cast<unsigned char>(name[k]);
  seed %= 1000003;
  const int64_t mask = 0xFFFFFFFFLL;
  auto i = torch::arange(numel, torch::kInt64);
  auto h = (i * int64_t{2654435761} + (seed * 97 + 12345)).bitwise_and(mask);
  h = (h.bitwise_xor(h.bitwise_right_shift(16)) * int64_t{73244475}).bitwise_and(mask);
  h = h.bitwise_xor(h.bitwise_right_shift(16));
  return h.to(torch::kFloat64) / 4294967296.0;
}

inline torch::Tensor det_resnet_tensor(const std::string& name, const std::vector<int64_t>& shape) {
  if (name.ends_with("num_batches_tracked")) return torch::zeros(shape, torch::kInt64);
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  auto u = det_uniform(name, numel);
  double half = 0.1, center = 0.0;
  if (shape.size() == 4) {
    half = std::sqrt(3.0) * std::sqrt(2.0 / static_cast<double>(shape[1] * shape[2] * shape[3]));
  } else if (name == "fc.weight") {
    half = 1.0 / std::sqrt(static_cast<double>(shape[1]));
  } else if (name.ends_with("running_var")) {
    half = 0.5, center = 1.0;
  } else if (name.ends_with(".weight")) {
    half = 0.1, center = 1.0;
  }
  return (center + half * (2.0 * u - 1.0)).to(torch::kFloat32).reshape(shape);
}

// det_fill.py's det_vit_tensor, bit-identical.
inline torch::Tensor det_vit_tensor(const std::string& name, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  auto u = det_uniform(name, numel);
  double half = 0.1, center = 0.0;
  if (shape.size() == 2 || shape.size() == 4) {
    half = std::sqrt(3.0 / static_cast<double>(numel / shape[0]));
  } else if (shape.size() == 1 && name.ends_with(".weight")) {
    center = 1.0;
  }
  return (center + half * (2.0 * u - 1.0)).to(torch::kFloat32).reshape(shape);
}

}  // namespace trainer::test
