#include "data/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include <fmt/format.h>

#include "data/vector_clones.hpp"

namespace trainer::data {

bool augment_enabled(const config::AugmentConfig& cfg) {
  return cfg.crop_padding > 0 || cfg.hflip || cfg.rotation_degrees > 0.0;
}

AugmentChoice sample_augment(const config::AugmentConfig& cfg, SampleRng& rng) {
  AugmentChoice a;
  // always draw in the same order, so enabling one transform does not change another's choices
  uint64_t cy = rng.next(), cx = rng.next();
  bool flip = rng.coin();
  double u = rng.uniform();
  if (cfg.crop_padding > 0) {
    a.crop_y = static_cast<int64_t>(cy % static_cast<uint64_t>(2 * cfg.crop_padding + 1));
    a.crop_x = static_cast<int64_t>(cx % static_cast<uint64_t>(2 * cfg.crop_padding + 1));
  }
  a.flip = cfg.hflip && flip;
  if (cfg.rotation_degrees > 0.0) a.angle_deg = (2.0 * u - 1.0) * cfg.rotation_degrees;
  return a;
}

bool alternating_flip(int64_t seed, int64_t epoch, int64_t index) {
  SampleRng rng = make_rng(RngStream::AlternateFlip, seed, /*epoch=*/0, index);  // the image's coin, every epoch
  return rng.coin() != (epoch % 2 != 0);
}

AugmentChoice augment_choice(const config::AugmentConfig& cfg, int64_t seed, int64_t epoch, int64_t index) {
  SampleRng rng = make_rng(RngStream::Augment, seed, epoch, index);
  AugmentChoice a = sample_augment(cfg, rng);
  if (cfg.hflip && cfg.hflip_alternate) a.flip = alternating_flip(seed, epoch, index);
  return a;
}

namespace {

// dst = src reversed, n bytes: a flipped row (std::reverse_copy stays scalar at -O2; this loop
// becomes vector loads, a byte shuffle and stores)
TRAINER_VECTOR_CLONES
void reverse_bytes(const uint8_t* __restrict src, int64_t n, uint8_t* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[n - 1 - i];
}

}  // namespace

void apply_augment(const uint8_t* src, int64_t channels, int64_t h, int64_t w, int64_t padding,
                   const AugmentChoice& a, uint8_t* dst) {
  const int64_t oy = a.crop_y - padding, ox = a.crop_x - padding;  // source offset of the crop
  if (a.angle_deg == 0.0) {
    for (int64_t c = 0; c < channels; ++c) {
      const uint8_t* plane = src + c * h * w;
      for (int64_t y = 0; y < h; ++y) {
        uint8_t* out = dst + (c * h + y) * w;
        int64_t sy = y + oy;
        if (sy < 0 || sy >= h) {
          std::memset(out, 0, w);
          continue;
        }
        const uint8_t* row = plane + sy * w;
        if (ox == 0) {  // no horizontal shift (RandomResizedCrop's samples): a copy, reversed for a flip
          if (a.flip) reverse_bytes(row, w, out);
          else std::memcpy(out, row, w);
          continue;
        }
        for (int64_t x = 0; x < w; ++x) {
          int64_t sx = (a.flip ? w - 1 - x : x) + ox;
          out[x] = (sx >= 0 && sx < w) ? row[sx] : 0;
        }
      }
    }
    return;
  }
  // inverse mapping: output pixel -> position in the cropped+flipped image -> source pixel
  const double theta = a.angle_deg * std::numbers::pi / 180.0;
  const double cs = std::cos(theta), sn = std::sin(theta);
  const double cy = (h - 1) / 2.0, cx = (w - 1) / 2.0;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      double dx = x - cx, dy = y - cy;
      int64_t rx = std::lround(cx + dx * cs - dy * sn);
      int64_t ry = std::lround(cy + dx * sn + dy * cs);
      bool inside = rx >= 0 && rx < w && ry >= 0 && ry < h;
      int64_t sy = ry + oy, sx = (a.flip ? w - 1 - rx : rx) + ox;
      inside = inside && sy >= 0 && sy < h && sx >= 0 && sx < w;
      for (int64_t c = 0; c < channels; ++c)
        dst[(c * h + y) * w + x] = inside ? src[(c * h + sy) * w + sx] : 0;
    }
}

StatsAccumulator::StatsAccumulator(int64_t channels)
    : sum_(channels, 0.0), sum_sq_(channels, 0.0), min_(channels, 255), max_(channels, 0) {}

void StatsAccumulator::add(const uint8_t* pixels, int64_t hw) {
  for (size_t c = 0; c < sum_.size(); ++c) {
    // integer sums per image are exact and fast; doubles only accumulate across images
    uint64_t s = 0, s2 = 0;
    int lo = min_[c], hi = max_[c];
    const uint8_t* p = pixels + c * hw;
    for (int64_t i = 0; i < hw; ++i) {
      uint32_t v = p[i];
      s += v;
      s2 += v * v;
      lo = std::min<int>(lo, v);
      hi = std::max<int>(hi, v);
    }
    sum_[c] += static_cast<double>(s);
    sum_sq_[c] += static_cast<double>(s2);
    min_[c] = lo;
    max_[c] = hi;
  }
  count_ += hw;
}

ChannelStats StatsAccumulator::result() const {
  ChannelStats s;
  for (size_t c = 0; c < sum_.size(); ++c) {
    double n = std::max<double>(static_cast<double>(count_), 1.0);
    double mean = sum_[c] / n / 255.0;
    double var = std::max(sum_sq_[c] / n / (255.0 * 255.0) - mean * mean, 0.0);
    s.mean.push_back(mean);
    s.std.push_back(std::sqrt(var));
    s.min.push_back(min_[c] / 255.0);
    s.max.push_back(max_[c] / 255.0);
  }
  return s;
}

Normalizer::Normalizer(const std::string& mode, int64_t channels, const std::vector<double>& a,
                       const std::vector<double>& b)
    : values_{mode, a, b} {
  for (int64_t c = 0; c < channels; ++c) {
    float row[256];
    for (int v = 0; v < 256; ++v) {
      double x = v / 255.0;
      if (mode == "mean_std") x = (x - a[c]) / (b[c] > 0 ? b[c] : 1.0);  // constant channel: centre only
      if (mode == "minmax") x = (x - a[c]) / (b[c] > a[c] ? b[c] - a[c] : 1.0);
      row[v] = static_cast<float>(x);
    }
    lookup_.emplace_back(row);
  }
  auto list = [](const std::vector<double>& v) {
    std::string s;
    for (double x : v) s += (s.empty() ? "" : ", ") + fmt::format("{:.4f}", x);
    return "[" + s + "]";
  };
  if (mode == "mean_std") text_ = "mean_std mean=" + list(a) + " std=" + list(b);
  else if (mode == "minmax") text_ = "minmax min=" + list(a) + " max=" + list(b);
}

std::vector<float> Normalizer::table(int64_t channels) const {
  std::vector<float> t(channels * 256);
  if (!lookup_.empty()) {
    for (int64_t c = 0; c < channels; ++c)
      std::copy(lookup_[c].values.begin(), lookup_[c].values.end(), t.begin() + c * 256);
    return t;
  }
  for (int64_t c = 0; c < channels; ++c)
    for (int v = 0; v < 256; ++v) t[c * 256 + v] = static_cast<uint8_t>(v) * (1.0f / 255.0f);  // apply()'s product
  return t;
}

void Normalizer::apply(const uint8_t* src, float* dst, int64_t batch, int64_t channels, int64_t hw) const {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) {
      const uint8_t* s = src + (b * channels + c) * hw;
      float* d = dst + (b * channels + c) * hw;
      if (!lookup_.empty())
        lookup_bytes(lookup_[static_cast<size_t>(c)], s, d, hw);
      else
        for (int64_t i = 0; i < hw; ++i) d[i] = s[i] * (1.0f / 255.0f);
    }
}

}  // namespace trainer::data
