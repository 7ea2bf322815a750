#include "engine/step/batch_mix.hpp"

#include <algorithm>
#include <cmath>
#include <vector>
#include <numbers>

#include "data/rng.hpp"

namespace trainer::engine {
namespace {

// The stream of the mixer's draws: apart from the loader's streams (data/rng.hpp uses 1..3).
constexpr uint64_t kMixStream = 0x6D69787570ull;  // "mixup"

double mix_uniform_open(data::SampleRng& r) { return 1.0 - r.uniform(); }  // (0, 1]

double mix_normal(data::SampleRng& r) {  // Box-Muller
  const double u1 = mix_uniform_open(r), u2 = r.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Gamma(a, 1), Marsaglia & Tsang (2000); a < 1 through Gamma(a + 1) * U^(1/a).
double mix_gamma(double a, data::SampleRng& r) {
  if (a < 1.0) return mix_gamma(a + 1.0, r) * std::pow(mix_uniform_open(r), 1.0 / a);
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    const double x = mix_normal(r);
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = mix_uniform_open(r);
    if (u < 1.0 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

double mix_beta(double a, data::SampleRng& r) {
  const double x = mix_gamma(a, r), y = mix_gamma(a, r);
  return x + y > 0 ? x / (x + y) : 0.5;  // both underflow only for tiny alpha: the symmetric middle
}

}  // namespace

double sample_beta(double a, uint64_t key) {
  data::SampleRng r(key);
  return mix_beta(a, r);
}

BatchMixer::BatchMixer(const config::MixupConfig& mixup, const config::CutmixConfig& cutmix, int64_t num_classes,
                       int64_t seed, int64_t rank)
    : mixup_(mixup), cutmix_(cutmix), classes_(num_classes), seed_(seed), rank_(rank) {}

// timm's Mixup._params_per_batch and rand_bbox (margin 0, correct_lam): the draws in timm's order.
MixChoice BatchMixer::choose(int64_t step, int64_t micro, int64_t height, int64_t width) const {
  data::SampleRng r(data::hash_key(data::hash_key(kMixStream, static_cast<uint64_t>(seed_)),
                                   data::hash_key(static_cast<uint64_t>(rank_), static_cast<uint64_t>(step)),
                                   static_cast<uint64_t>(micro)));
  MixChoice c;
  if (!(r.uniform() < mixup_.prob)) return c;
  bool cutmix = mixup_.alpha <= 0;
  if (mixup_.alpha > 0 && cutmix_.alpha > 0) cutmix = r.uniform() < mixup_.switch_prob;
  const double lam = mix_beta(cutmix ? cutmix_.alpha : mixup_.alpha, r);
  if (!cutmix) {
    c.kind = MixChoice::Kind::Mixup;
    c.lambda = lam;
    return c;
  }
  const double cut = std::sqrt(1.0 - lam);
  const auto cut_h = static_cast<int64_t>(static_cast<double>(height) * cut);
  const auto cut_w = static_cast<int64_t>(static_cast<double>(width) * cut);
  const auto cy = static_cast<int64_t>(r.below(static_cast<uint64_t>(height)));
  const auto cx = static_cast<int64_t>(r.below(static_cast<uint64_t>(width)));
  c.kind = MixChoice::Kind::Cutmix;
  c.y0 = std::clamp<int64_t>(cy - cut_h / 2, 0, height);
  c.y1 = std::clamp<int64_t>(cy + cut_h / 2, 0, height);
  c.x0 = std::clamp<int64_t>(cx - cut_w / 2, 0, width);
  c.x1 = std::clamp<int64_t>(cx + cut_w / 2, 0, width);
  // the targets follow the pixels: lambda is what is left of the batch's own image
  c.lambda = 1.0 - static_cast<double>((c.y1 - c.y0) * (c.x1 - c.x0)) / static_cast<double>(height * width);
  return c;
}

std::pair<torch::Tensor, torch::Tensor> BatchMixer::apply(const torch::Tensor& input, const torch::Tensor& target,
                                                          const MixChoice& c) const {
  if (c.kind == MixChoice::Kind::None) return {input, target};
  torch::NoGradGuard ng;
  torch::Tensor mixed;
  if (c.kind == MixChoice::Kind::Mixup) {
    mixed = input * c.lambda + input.flip(0) * (1.0 - c.lambda);
  } else {
    using torch::indexing::Slice;
    mixed = input.clone();  // the loader's tensor stays as it was
    const std::vector<torch::indexing::TensorIndex> box = {Slice(), Slice(), Slice(c.y0, c.y1), Slice(c.x0, c.x1)};
    mixed.index_put_(box, input.flip(0).index(box));
  }
  const auto one_hot = torch::one_hot(target, classes_).to(torch::kFloat32);  // (B, classes)
  auto soft = one_hot * c.lambda + one_hot.flip(0) * (1.0 - c.lambda);
  return {mixed, soft};
}

}  // namespace trainer::engine
