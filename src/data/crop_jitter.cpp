#include "data/crop_jitter.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "data/transforms.hpp"
#include "data/jitter_kernels.hpp"

namespace trainer::data {
namespace {

double cj_uniform(SampleRng& rng, double lo, double hi) { return lo + (hi - lo) * rng.uniform(); }

// Python's round(): halves to even, as get_params' int(round(...)).
int64_t cj_round(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

// rgb_to_grayscale on uint8 (jitter_kernels.hpp: the byte loops, vectorised with the scalar bytes).
void cj_grayscale(const uint8_t* img, int64_t hw, std::vector<uint8_t>& gray) {
  gray.resize(hw);
  jitter_kernels::gray(img, img + hw, img + 2 * hw, gray.data(), hw);
}

// _blend(img, other, ratio): ratio * img + (1 - ratio) * other, float32, clamp, truncate.
// (torch: the Python float ratio and 1 - ratio become float32 scalars of float32 products)
void cj_blend(uint8_t* img, int64_t n, double ratio, float other) {
  const float r = static_cast<float>(ratio), rest = static_cast<float>(1.0 - ratio) * other;
  jitter_kernels::blend(img, nullptr, n, r, 0.0f, rest);
}

}  // namespace

CropBox sample_resized_crop(int64_t h, int64_t w, const std::vector<double>& scale, const std::vector<double>& ratio,
                            SampleRng& rng) {
  const double area = static_cast<double>(h * w);
  const double log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * cj_uniform(rng, scale[0], scale[1]);
    const double aspect = std::exp(cj_uniform(rng, log_lo, log_hi));
    const int64_t cw = cj_round(std::sqrt(target_area * aspect)), ch = cj_round(std::sqrt(target_area / aspect));
    if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
      const auto top = static_cast<int64_t>(rng.below(static_cast<uint64_t>(h - ch + 1)));
      const auto left = static_cast<int64_t>(rng.below(static_cast<uint64_t>(w - cw + 1)));
      return {top, left, ch, cw};
    }
  }
  // the fallback: the whole image, or its centre with the aspect ratio clamped into `ratio`
  const double in_ratio = static_cast<double>(w) / static_cast<double>(h);
  int64_t cw = w, ch = h;
  if (in_ratio < ratio[0]) ch = cj_round(static_cast<double>(w) / ratio[0]);
  else if (in_ratio > ratio[1]) cw = cj_round(static_cast<double>(h) * ratio[1]);
  return {(h - ch) / 2, (w - cw) / 2, ch, cw};
}

void resized_crop(const uint8_t* src, int64_t channels, int64_t h, int64_t w, const CropBox& box, uint8_t* dst,
                  int64_t out_h, int64_t out_w, std::vector<uint8_t>& tmp, std::vector<float>& scratch) {
  tmp.resize(channels * box.height * box.width);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < box.height; ++y)
      std::memcpy(tmp.data() + (c * box.height + y) * box.width, src + (c * h + box.top + y) * w + box.left,
                  box.width);
  resize_bilinear(tmp.data(), channels, box.height, box.width, dst, out_h, out_w, scratch);
}

bool jitter_enabled(const config::AugmentConfig& cfg) {
  return cfg.brightness > 0 || cfg.contrast > 0 || cfg.saturation > 0 || cfg.hue > 0;
}

// ColorJitter.get_params: the permutation first, then each factor that is on, in this order.
JitterChoice sample_jitter(const config::AugmentConfig& cfg, SampleRng& rng) {
  JitterChoice c;
  for (int i = 3; i > 0; --i) std::swap(c.order[i], c.order[rng.below(static_cast<uint64_t>(i + 1))]);
  auto factor = [&](double v) { return cj_uniform(rng, std::max(0.0, 1.0 - v), 1.0 + v); };
  if (cfg.brightness > 0) c.brightness = factor(cfg.brightness);
  if (cfg.contrast > 0) c.contrast = factor(cfg.contrast);
  if (cfg.saturation > 0) c.saturation = factor(cfg.saturation);
  if (cfg.hue > 0) c.hue = cj_uniform(rng, -cfg.hue, cfg.hue);
  return c;
}

void adjust_brightness(uint8_t* img, int64_t channels, int64_t hw, double factor) {
  cj_blend(img, channels * hw, factor, 0.0f);
}

// The mean of the (truncated) grayscale image for RGB, of the image itself otherwise.
void adjust_contrast(uint8_t* img, int64_t channels, int64_t hw, double factor) {
  double sum = 0;
  if (channels == 3) {
    thread_local std::vector<uint8_t> gray;
    cj_grayscale(img, hw, gray);
    sum = static_cast<double>(jitter_kernels::sum(gray.data(), hw)) / static_cast<double>(hw);
  } else {
    sum = static_cast<double>(jitter_kernels::sum(img, channels * hw)) / static_cast<double>(channels * hw);
  }
  cj_blend(img, channels * hw, factor, static_cast<float>(sum));
}

void adjust_saturation(uint8_t* img, int64_t channels, int64_t hw, double factor) {
  if (channels != 3) return;
  thread_local std::vector<uint8_t> gray;
  cj_grayscale(img, hw, gray);
  const auto ratio = static_cast<float>(factor), rest = static_cast<float>(1.0 - factor);
  for (int64_t c = 0; c < 3; ++c) jitter_kernels::blend(img + c * hw, gray.data(), hw, ratio, rest, 0.0f);
}

// RGB -> HSV (torchvision's _rgb2hsv, after Pillow), shift the hue on the unit circle, back
// (_hsv2rgb), then to uint8 as convert_image_dtype: x * (255 + 1 - 1e-3), truncated
// (jitter_kernels::hue, vectorised).
void adjust_hue(uint8_t* img, int64_t channels, int64_t hw, double hue_factor) {
  if (channels != 3) return;
  jitter_kernels::hue(img, img + hw, img + 2 * hw, hw, static_cast<float>(hue_factor));
}

void apply_jitter(uint8_t* img, int64_t channels, int64_t hw, const config::AugmentConfig& cfg, const JitterChoice& c) {
  for (int fn : c.order) {
    if (fn == 0 && cfg.brightness > 0) adjust_brightness(img, channels, hw, c.brightness);
    if (fn == 1 && cfg.contrast > 0) adjust_contrast(img, channels, hw, c.contrast);
    if (fn == 2 && cfg.saturation > 0) adjust_saturation(img, channels, hw, c.saturation);
    if (fn == 3 && cfg.hue > 0) adjust_hue(img, channels, hw, c.hue);
  }
}

}  // namespace trainer::data
