// Mixup / CutMix of training micro-batches (data.mixup, data.cutmix), as timm's Mixup in its
// default 'batch' mode: one lambda per micro-batch, each sample paired with its mirror in the batch
// (x.flip(0)), soft targets lambda y + (1 - lambda) y.flip(0). Label smoothing is not applied here:
// the loss applies it to the soft targets (torch's cross_entropy(label_smoothing=)), which equals
// timm's mixup of smoothed one-hot targets because both are linear.
//
// The choices are a pure function of (run.seed, rank, optimizer step, micro-batch): nothing to
// checkpoint beyond the step, so a resumed run mixes exactly as the uninterrupted one.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>

#include "config/config.hpp"

namespace trainer::engine {

struct MixChoice {
  enum class Kind { None, Mixup, Cutmix };
  Kind kind = Kind::None;
  double lambda = 1.0;  // weight of the batch itself; cutmix: 1 - the box's true area fraction
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;  // cutmix: the box [y0, y1) x [x0, x1) taken from x.flip(0)
};

// Beta(a, a) from uniform draws (Marsaglia-Tsang gamma variates): exposed for its distribution test.
double sample_beta(double a, uint64_t key);

class BatchMixer {
 public:
  BatchMixer(const config::MixupConfig& mixup, const config::CutmixConfig& cutmix, int64_t num_classes, int64_t seed,
             int64_t rank);
  static bool wanted(const config::MixupConfig& mixup, const config::CutmixConfig& cutmix) {
    return mixup.alpha > 0 || cutmix.alpha > 0;
  }

  // The mix of micro-batch `micro` of the optimizer step after `step` steps, for images h x w.
  MixChoice choose(int64_t step, int64_t micro, int64_t height, int64_t width) const;

  // (input (B, C, H, W) float, target (B) int64) -> the mixed input and soft targets (B, classes) in
  // fp32. Kind::None returns both unchanged (the loss of integer targets is the same as of one-hot ones).
  std::pair<torch::Tensor, torch::Tensor> apply(const torch::Tensor& input, const torch::Tensor& target,
                                                const MixChoice& choice) const;

 private:
  config::MixupConfig mixup_;
  config::CutmixConfig cutmix_;
  int64_t classes_, seed_, rank_;
};

}  // namespace trainer::engine
