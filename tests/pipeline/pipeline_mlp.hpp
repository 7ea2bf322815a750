// A small fp64 MLP cut into pipeline stages, and its one-process reference (gradient accumulation
// over M microbatches): what the executor's tests run, in one process (threads) and over Gloo.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "pipeline/executor.hpp"
#include "pipeline/partition.hpp"

namespace trainer::test::pipeline_mlp {

constexpr int64_t kLayers = 7, kWidth = 6, kMicro = 3;  // 7 layers: uneven over 2, 3, 4 and 6 stages

struct Mlp {
  std::vector<torch::Tensor> w, b;  // layer i: x -> tanh(x w_i^T + b_i) (the last layer without tanh)
  explicit Mlp(uint64_t seed) {
    torch::manual_seed(seed);
    for (int64_t i = 0; i < kLayers; ++i) {
      w.push_back(torch::randn({kWidth, kWidth}, torch::kFloat64).mul_(0.5).requires_grad_(true));
      b.push_back(torch::randn({kWidth}, torch::kFloat64).mul_(0.1).requires_grad_(true));
    }
  }
  Mlp(const Mlp& o) {  // fresh leaves with the same values
    for (size_t i = 0; i < o.w.size(); ++i) {
      w.push_back(o.w[i].detach().clone().requires_grad_(true));
      b.push_back(o.b[i].detach().clone().requires_grad_(true));
    }
  }
  torch::Tensor layers(torch::Tensor x, int64_t first, int64_t last) const {
    for (int64_t i = first; i <= last; ++i) {
      x = torch::addmm(b[i], x, w[i].t());
      if (i < kLayers - 1) x = torch::tanh(x);
    }
    return x;
  }
};

// microbatch m: `rows` rows (kMicro, or fewer: a step whose messages change shape)
inline torch::Tensor batch(int64_t m, int64_t rows = kMicro) {
  return torch::arange(kMicro * kWidth, torch::kFloat64).reshape({kMicro, kWidth}).mul(0.1 * (m + 1)).sin().narrow(0, 0, rows);
}
inline torch::Tensor target(int64_t m) { return torch::full({kMicro, kWidth}, 0.3 * m - 0.5, torch::kFloat64); }
inline torch::Tensor loss_of(const torch::Tensor& y, int64_t m) { return (y - target(m).narrow(0, 0, y.size(0))).pow(2).mean(); }

// One process: M microbatches, loss / M each, backward after each (gradient accumulation).
inline double reference(Mlp& net, int64_t M, int64_t rows = kMicro) {
  double sum = 0;
  for (int64_t m = 0; m < M; ++m) {
    auto loss = loss_of(net.layers(batch(m, rows), 0, kLayers - 1), m);
    sum += loss.item<double>();
    (loss / static_cast<double>(M)).backward();
  }
  return sum;
}

// The stages of `net` that `rank` runs under `sh`, the layers split evenly over the stages.
inline std::vector<pipeline::StageFn> stages_of(const Mlp& net, const pipeline::PipelineShape& sh, int64_t rank) {
  const auto split = pipeline::balance_stages(std::vector<double>(kLayers, 1.0), sh.stages());
  std::vector<pipeline::StageFn> stages;
  for (int64_t s = rank; s < sh.stages(); s += sh.ranks) {
    const auto range = split[static_cast<size_t>(s)];
    pipeline::StageFn f;
    f.stage = s;
    const bool last = s == sh.stages() - 1;
    f.forward = [&net, range, last](const torch::Tensor& x, int64_t m) {
      auto y = net.layers(x, range.first, range.last);
      return last ? loss_of(y, m) : y;
    };
    for (int64_t i = range.first; i <= range.last; ++i) f.params.insert(f.params.end(), {net.w[i], net.b[i]});
    stages.push_back(f);
  }
  return stages;
}

}  // namespace trainer::test::pipeline_mlp
