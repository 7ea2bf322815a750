// Image transforms on planar uint8 (C, H, W) pixels: resize, random crop with padding, horizontal
// flip, random rotation, and the per-batch conversion to normalised float. Geometry works on bytes
// by index arithmetic; the float conversion is one table lookup per pixel, once per batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/byte_lookup.hpp"
#include "data/rng.hpp"

namespace trainer::data {

// Antialiased bilinear resize (a triangle filter widened by the downscale factor, like PIL's
// BILINEAR), separable: rows then columns through a float scratch buffer.
void resize_bilinear(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, uint8_t* dst,
                     int64_t dst_h, int64_t dst_w, std::vector<float>& scratch);

// A window of an image in (fractional) pixels: what a crop at another scale covers.
struct SourceWindow {
  double top = 0, left = 0, height = 0, width = 0;
};
// The same resize of the window `win` of src (the filter cut at the window's edges, as if it were
// the whole image): RandomResizedCrop's box from an image decoded at 1/2, 1/4 or 1/8 scale.
void resize_bilinear_window(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, const SourceWindow& win,
                            uint8_t* dst, int64_t dst_h, int64_t dst_w, std::vector<float>& scratch);

// torchvision's Resize(short_side) + CenterCrop(size) geometry: the shorter side becomes
// short_side, the longer int(short_side * long / short) (truncated); the crop starts at
// round((resized - size) / 2), halves to even as Python rounds.
struct ShortSideCrop {
  int64_t height = 0, width = 0;  // the resized image
  int64_t top = 0, left = 0;      // the crop's corner in it
};
ShortSideCrop short_side_crop(int64_t src_h, int64_t src_w, int64_t short_side, int64_t size);

// What src holds when it is a JPEG decoded at 1/scale (DecodedImage's scale and whole size): the
// whole_h x whole_w image as [0, whole / scale) of its pixels.
struct ScaledDecode {
  int64_t scale = 1, whole_h = 0, whole_w = 0;
};
// Resize so the shorter side is `short_side` (>= size), then take the centred size x size crop.
// Only the crop's pixels are computed (with the filter of the whole resize). For a scaled decode
// the geometry is the whole image's (as torchvision resizes the full decode) and the filter maps
// the resized image onto [0, whole / scale) of src, the pixels DCT scaling averaged.
void resize_short_center_crop(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, uint8_t* dst,
                              int64_t short_side, int64_t size, std::vector<float>& scratch,
                              const ScaledDecode& scaled = {});

// The random choices of one augmented sample.
struct AugmentChoice {
  int64_t crop_y = 0, crop_x = 0;  // top-left of the crop in the zero-padded image, in [0, 2 * padding]
  bool flip = false;
  double angle_deg = 0.0;  // counter-clockwise, as torchvision's RandomRotation
};

bool augment_enabled(const config::AugmentConfig& cfg);
AugmentChoice sample_augment(const config::AugmentConfig& cfg, SampleRng& rng);
// data.augment.hflip_alternate (airbench's derandomized flip): whether image `index` is flipped in
// `epoch`: its own coin in epoch 0, then the opposite of the epoch before. Random flips show an image
// the same way in consecutive epochs half the time; this never does, and stays p = 0.5 per epoch.
bool alternating_flip(int64_t seed, int64_t epoch, int64_t index);
// Every choice of sample `index` in `epoch`, the one place that decides them: sample_augment's draws
// from the Augment stream, the flip taken from alternating_flip instead when hflip_alternate is on
// (the other draws stay as they are, so turning it on changes no crop or angle).
AugmentChoice augment_choice(const config::AugmentConfig& cfg, int64_t seed, int64_t epoch, int64_t index);

// dst = rotate(flip(crop(pad(src)))) with zero fill and nearest-neighbour rotation, same size as src.
void apply_augment(const uint8_t* src, int64_t channels, int64_t h, int64_t w, int64_t padding,
                   const AugmentChoice& choice, uint8_t* dst);

// Per-channel statistics of pixel values in [0, 1] units (torchvision's convention for mean/std).
struct ChannelStats {
  std::vector<double> mean, std, min, max;
};

class StatsAccumulator {
 public:
  explicit StatsAccumulator(int64_t channels);
  void add(const uint8_t* pixels, int64_t hw);  // one (C, H, W) image
  ChannelStats result() const;

 private:
  std::vector<double> sum_, sum_sq_;
  std::vector<int> min_, max_;
  int64_t count_ = 0;  // pixels per channel
};

// uint8 -> float through a 256-entry table per channel.
//   none:     x / 255
//   mean_std: (x / 255 - mean) / std
//   minmax:   (x / 255 - min) / (max - min), min and max of the training split, per channel
// What a Normalizer was made from: its mode ("none", "mean_std", "minmax") and per-channel values
// (mean and std, or min and max), as a checkpoint records them for eval, predict and export.
struct NormalizeValues {
  std::string mode = "none";
  std::vector<double> a, b;
};

class Normalizer {
 public:
  Normalizer() = default;
  Normalizer(const std::string& mode, int64_t channels, const std::vector<double>& a, const std::vector<double>& b);
  // (B, C, H, W) uint8 -> (B, C, H, W) float
  void apply(const uint8_t* src, float* dst, int64_t batch, int64_t channels, int64_t hw) const;
  // apply()'s values as a (channels, 256) table: row c, column v is what byte v of channel c becomes
  std::vector<float> table(int64_t channels) const;
  std::string describe() const { return text_; }
  const NormalizeValues& values() const { return values_; }

 private:
  NormalizeValues values_;
  std::vector<ByteTable> lookup_;  // per channel: what each byte becomes (empty: x / 255)
  std::string text_ = "none";
};

}  // namespace trainer::data
