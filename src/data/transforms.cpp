#include "data/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include <fmt/format.h>

namespace trainer::data {
namespace {

// Contribution of each source pixel to each output pixel along one axis.
struct AxisWeights {
  std::vector<int64_t> start, count;
  std::vector<float> weights;  // (out, max_count)
  int64_t max_count = 0;
};

// The window [off, off + len) of an axis of `in` pixels onto `out` pixels (the whole axis: off 0,
// len in); the filter is cut at the window's edges, as if the window were the whole image.
AxisWeights axis_weights(int64_t in, int64_t out, double off, double len) {
  AxisWeights a;
  double scale = len / static_cast<double>(out);
  const int64_t first = std::max<int64_t>(0, static_cast<int64_t>(std::floor(off)));
  const int64_t end = std::min<int64_t>(in, static_cast<int64_t>(std::ceil(off + len)));
  double support = std::max(scale, 1.0);  // the triangle widens when shrinking: antialiasing
  a.max_count = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  a.start.resize(out);
  a.count.resize(out);
  a.weights.assign(out * a.max_count, 0.0f);
  for (int64_t i = 0; i < out; ++i) {
    double center = (i + 0.5) * scale + off;
    int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), first);
    int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), end);
    double total = 0.0;
    float* w = &a.weights[i * a.max_count];
    for (int64_t j = lo; j < hi && j - lo < a.max_count; ++j) {
      double t = std::abs((j - center + 0.5) / support);
      double v = t < 1.0 ? 1.0 - t : 0.0;
      w[j - lo] = static_cast<float>(v);
      total += v;
    }
    int64_t n = std::min(hi - lo, a.max_count);
    if (total > 0)
      for (int64_t k = 0; k < n; ++k) w[k] = static_cast<float>(w[k] / total);
    a.start[i] = lo;
    a.count[i] = n;
  }
  return a;
}

inline uint8_t to_byte(float v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0l, 255l)); }

}  // namespace

void resize_bilinear(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, uint8_t* dst,
                     int64_t dst_h, int64_t dst_w, std::vector<float>& scratch) {
  if (src_h == dst_h && src_w == dst_w) {
    std::memcpy(dst, src, channels * src_h * src_w);
    return;
  }
  resize_bilinear_window(src, channels, src_h, src_w, SourceWindow{0, 0, static_cast<double>(src_h), static_cast<double>(src_w)},
                         dst, dst_h, dst_w, scratch);
}

void resize_bilinear_window(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, const SourceWindow& win,
                            uint8_t* dst, int64_t dst_h, int64_t dst_w, std::vector<float>& scratch) {
  AxisWeights wx = axis_weights(src_w, dst_w, win.left, win.width), wy = axis_weights(src_h, dst_h, win.top, win.height);
  scratch.resize(src_h * dst_w);  // one channel of the horizontal pass: (src_h, dst_w)
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = src + c * src_h * src_w;
    for (int64_t y = 0; y < src_h; ++y) {
      const uint8_t* row = plane + y * src_w;
      for (int64_t x = 0; x < dst_w; ++x) {
        const float* w = &wx.weights[x * wx.max_count];
        float acc = 0.0f;
        for (int64_t k = 0; k < wx.count[x]; ++k) acc += w[k] * row[wx.start[x] + k];
        scratch[y * dst_w + x] = acc;
      }
    }
    uint8_t* out = dst + c * dst_h * dst_w;
    for (int64_t y = 0; y < dst_h; ++y) {
      const float* w = &wy.weights[y * wy.max_count];
      for (int64_t x = 0; x < dst_w; ++x) {
        float acc = 0.0f;
        for (int64_t k = 0; k < wy.count[y]; ++k) acc += w[k] * scratch[(wy.start[y] + k) * dst_w + x];
        out[y * dst_w + x] = to_byte(acc);
      }
    }
  }
}

void resize_short_center_crop(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, uint8_t* dst,
                              int64_t size, std::vector<uint8_t>& tmp, std::vector<float>& scratch) {
  // the shorter side becomes `size`; the longer keeps the aspect ratio (at least `size`)
  int64_t h = size, w = size;
  if (src_h < src_w) w = std::max<int64_t>(size, std::llround(static_cast<double>(src_w) * size / src_h));
  if (src_w < src_h) h = std::max<int64_t>(size, std::llround(static_cast<double>(src_h) * size / src_w));
  const uint8_t* resized = src;
  if (h != src_h || w != src_w) {
    tmp.resize(channels * h * w);
    resize_bilinear(src, channels, src_h, src_w, tmp.data(), h, w, scratch);
    resized = tmp.data();
  }
  int64_t top = (h - size) / 2, left = (w - size) / 2;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < size; ++y)
      std::memcpy(dst + (c * size + y) * size, resized + (c * h + top + y) * w + left, size);
}

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
                       const std::vector<double>& b) {
  table_.resize(channels * 256);
  for (int64_t c = 0; c < channels; ++c)
    for (int v = 0; v < 256; ++v) {
      double x = v / 255.0;
      if (mode == "mean_std") x = (x - a[c]) / (b[c] > 0 ? b[c] : 1.0);  // constant channel: centre only
      if (mode == "minmax") x = (x - a[c]) / (b[c] > a[c] ? b[c] - a[c] : 1.0);
      table_[c * 256 + v] = static_cast<float>(x);
    }
  auto list = [](const std::vector<double>& v) {
    std::string s;
    for (double x : v) s += (s.empty() ? "" : ", ") + fmt::format("{:.4f}", x);
    return "[" + s + "]";
  };
  if (mode == "mean_std") text_ = "mean_std mean=" + list(a) + " std=" + list(b);
  else if (mode == "minmax") text_ = "minmax min=" + list(a) + " max=" + list(b);
}

void Normalizer::apply(const uint8_t* src, float* dst, int64_t batch, int64_t channels, int64_t hw) const {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) {
      const float* t = table_.empty() ? nullptr : &table_[c * 256];
      const uint8_t* s = src + (b * channels + c) * hw;
      float* d = dst + (b * channels + c) * hw;
      if (t)
        for (int64_t i = 0; i < hw; ++i) d[i] = t[s[i]];
      else
        for (int64_t i = 0; i < hw; ++i) d[i] = s[i] * (1.0f / 255.0f);
    }
}

}  // namespace trainer::data
