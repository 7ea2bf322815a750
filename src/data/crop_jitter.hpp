// torchvision's RandomResizedCrop and ColorJitter on planar uint8 (C, H, W) pixels, with the same
// parameters and formulas (transforms.RandomResizedCrop.get_params, transforms.ColorJitter and the
// tensor kernels of transforms.functional on uint8: float32 blends, truncation back to uint8). The
// random draws come from the per-sample counter-based streams (data/rng.hpp), so a sample gets the
// same crop and jitter whichever worker builds it, and after a resume.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "config/config.hpp"
#include "data/rng.hpp"

namespace trainer::data {

struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool operator==(const CropBox&) const = default;
};

// RandomResizedCrop.get_params: up to 10 draws of an area (scale x h x w) and a log-uniform aspect
// ratio (width / height) whose rounded box fits, at a uniform position; else the centre crop with
// the aspect ratio clamped to `ratio`. scale and ratio are [min, max].
CropBox sample_resized_crop(int64_t h, int64_t w, const std::vector<double>& scale, const std::vector<double>& ratio,
                            SampleRng& rng);

// The box of `src` (C, h, w) resized to out_h x out_w (antialiased bilinear, resize_bilinear).
void resized_crop(const uint8_t* src, int64_t channels, int64_t h, int64_t w, const CropBox& box, uint8_t* dst,
                  int64_t out_h, int64_t out_w, std::vector<uint8_t>& tmp, std::vector<float>& scratch);

// One sample's ColorJitter draw: the order of the four adjustments (0 brightness, 1 contrast,
// 2 saturation, 3 hue, as torchvision's fn_idx) and their factors; an adjustment that is off keeps
// its neutral factor and is skipped.
struct JitterChoice {
  std::array<int, 4> order = {0, 1, 2, 3};
  double brightness = 1, contrast = 1, saturation = 1, hue = 0;
};

bool jitter_enabled(const config::AugmentConfig& cfg);
JitterChoice sample_jitter(const config::AugmentConfig& cfg, SampleRng& rng);

// The adjustments, in place on one (C, H, W) image (hw = H * W). Saturation and hue need C == 3
// (the config refuses them otherwise; with C != 3 they leave the image as it is, as torchvision's
// saturation does for one channel).
void adjust_brightness(uint8_t* img, int64_t channels, int64_t hw, double factor);
void adjust_contrast(uint8_t* img, int64_t channels, int64_t hw, double factor);
void adjust_saturation(uint8_t* img, int64_t channels, int64_t hw, double factor);
void adjust_hue(uint8_t* img, int64_t channels, int64_t hw, double hue_factor);
void apply_jitter(uint8_t* img, int64_t channels, int64_t hw, const config::AugmentConfig& cfg, const JitterChoice& c);

}  // namespace trainer::data
