// The vectorised resize (src/data/resize.cpp, resize_byte_pass.cpp) against the scalar loops it
// replaced (kept here as the reference), at every filter width the CPU has: the same bytes for
// whole images, windows at every DCT scale's fractions, up- and downscales (shrinks of up to 300x,
// past the byte pass's 32 taps), and the centre crop computed alone against the crop of the whole
// resize.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include <fmt/format.h>

#include "data/byte_lookup.hpp"
#include "data/jitter_kernels.hpp"
#include "data/resize_detail.hpp"
#include "data/transforms.hpp"
#include "test_util.hpp"

using namespace trainer::data;

namespace resize_reference {

void ref_resize_bilinear_window(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, const SourceWindow& win,
                                uint8_t* dst, int64_t dst_h, int64_t dst_w, std::vector<float>& scratch);

using resize_detail::AxisWeights;
using resize_detail::axis_weights;  // the same weights: the passes are what changed

uint8_t to_byte(float v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0l, 255l)); }


void ref_resize_bilinear(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, uint8_t* dst,
                     int64_t dst_h, int64_t dst_w, std::vector<float>& scratch) {
  if (src_h == dst_h && src_w == dst_w) {
    std::memcpy(dst, src, channels * src_h * src_w);
    return;
  }
  ref_resize_bilinear_window(src, channels, src_h, src_w, SourceWindow{0, 0, static_cast<double>(src_h), static_cast<double>(src_w)},
                         dst, dst_h, dst_w, scratch);
}

void ref_resize_bilinear_window(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, const SourceWindow& win,
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

void ref_resize_short_center_crop(const uint8_t* src, int64_t channels, int64_t src_h, int64_t src_w, uint8_t* dst,
                                  int64_t short_side, int64_t size, std::vector<uint8_t>& tmp,
                                  std::vector<float>& scratch) {
  // torchvision: Resize(short_side) makes the longer side int(short_side * long / short), then
  // CenterCrop(size) starts at int(round((resized - size) / 2.0)) (std::nearbyint: halves to even)
  int64_t h = short_side, w = short_side;
  if (src_h > src_w) h = static_cast<int64_t>(std::trunc(static_cast<double>(short_side * src_h) / src_w));
  if (src_w > src_h) w = static_cast<int64_t>(std::trunc(static_cast<double>(short_side * src_w) / src_h));
  const uint8_t* resized = src;
  if (h != src_h || w != src_w) {
    tmp.resize(channels * h * w);
    ref_resize_bilinear(src, channels, src_h, src_w, tmp.data(), h, w, scratch);
    resized = tmp.data();
  }
  const auto top = static_cast<int64_t>(std::nearbyint((h - size) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint((w - size) / 2.0));
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < size; ++y)
      std::memcpy(dst + (c * size + y) * size, resized + (c * h + top + y) * w + left, size);
}


}  // namespace resize_reference

namespace {

std::vector<uint8_t> random_image(std::mt19937& rng, int64_t c, int64_t h, int64_t w) {
  std::vector<uint8_t> img(static_cast<size_t>(c * h * w));
  // texture, not white noise: smooth ramps plus noise, like a photo's pixels
  for (int64_t i = 0; i < c * h * w; ++i) img[i] = static_cast<uint8_t>((i % w) * 3 + (i / w) % 7 * 11 + rng() % 40);
  return img;
}

}  // namespace

TEST_CASE("the vectorised resize gives the scalar reference's bytes: whole images, windows, up and down", "[unit]") {
  // every filter width this CPU runs (AVX-512, AVX2, SSE2): a host picks one, CI hosts differ
  std::set<int> widths;
  for (int want : {16, 8, 4}) widths.insert(resize_detail::filter_width_for_tests(want));
  std::mt19937 rng(7);
  std::vector<float> s1, s2;
  int cases = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int width = *std::next(widths.begin(), trial % static_cast<int>(widths.size()));
    resize_detail::filter_width_for_tests(width);
    INFO("filter width " << width << " floats");
    const int64_t c = trial % 3 == 0 ? 1 : 3, h = 5 + rng() % 300, w = 5 + rng() % 300;
    const auto img = random_image(rng, c, h, w);
    const int64_t oh = 1 + rng() % 240, ow = 1 + rng() % 240;
    std::vector<uint8_t> mine(c * oh * ow), ref(c * oh * ow);
    resize_bilinear(img.data(), c, h, w, mine.data(), oh, ow, s1);
    resize_reference::ref_resize_bilinear(img.data(), c, h, w, ref.data(), oh, ow, s2);
    INFO(c << "x" << h << "x" << w << " -> " << oh << "x" << ow);
    CHECK(mine == ref);
    // a fractional window (RandomResizedCrop's box at a DCT scale)
    const double top = (rng() % 1000) / 1000.0 * h / 2, left = (rng() % 1000) / 1000.0 * w / 2;
    const SourceWindow win{top, left, (h - top) * (0.3 + (rng() % 700) / 1000.0), (w - left) * (0.3 + (rng() % 700) / 1000.0)};
    resize_bilinear_window(img.data(), c, h, w, win, mine.data(), oh, ow, s1);
    resize_reference::ref_resize_bilinear_window(img.data(), c, h, w, win, ref.data(), oh, ow, s2);
    INFO("window " << win.top << " " << win.left << " " << win.height << " " << win.width);
    CHECK(mine == ref);
    ++cases;
  }
  resize_detail::filter_width_for_tests(0);
  CHECK(cases == 120);
  CHECK(widths.count(4) == 1);  // the baseline runs everywhere
}

TEST_CASE("the centre crop of a resize, computed alone, is the crop of the whole resize", "[unit]") {
  std::mt19937 rng(11);
  std::vector<float> s1, s2;
  std::vector<uint8_t> t2;
  std::set<int> widths;  // every filter width this CPU runs, as above
  for (int want : {16, 8, 4}) widths.insert(resize_detail::filter_width_for_tests(want));
  for (int width : widths) {
    resize_detail::filter_width_for_tests(width);
    INFO("filter width " << width << " floats");
    for (auto [h, w, short_side, size] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
             {375, 500, 224, 224},
             {500, 375, 224, 224},
             {375, 500, 256, 224},
             {333, 500, 256, 224},
             {300, 300, 224, 224},
             {100, 150, 224, 224},
             {224, 300, 224, 224},
             {224, 300, 256, 224},
             {37, 50, 16, 16},
             {50, 37, 17, 17},
             {50, 30, 16, 16},
             {37, 100, 16, 16},
             {37, 100, 19, 16},
             {60, 2000, 20, 20}}) {  // 100 taps
      const auto img = random_image(rng, 3, h, w);
      std::vector<uint8_t> mine(3 * size * size), ref(3 * size * size);
      resize_short_center_crop(img.data(), 3, h, w, mine.data(), short_side, size, s1);
      resize_reference::ref_resize_short_center_crop(img.data(), 3, h, w, ref.data(), short_side, size, t2, s2);
      INFO(h << "x" << w << " -> " << short_side << " -> " << size);
      CHECK(mine == ref);
    }
  }
  resize_detail::filter_width_for_tests(0);
}

TEST_CASE("Resize(short) + CenterCrop(size) has torchvision's geometry: the long side truncated, an odd margin's "
          "half rounded to even",
          "[unit]") {
  // {src h, src w, short side, crop, resized h, resized w, top, left}: from torchvision 0.26's
  // _compute_resized_output_size and CenterCrop's int(round((h - size) / 2.0))
  const std::vector<std::array<int64_t, 8>> cases{
      {50, 30, 16, 16, 26, 16, 5, 0},          {37, 100, 16, 16, 16, 43, 0, 14},
      {375, 500, 256, 224, 256, 341, 16, 58},  {500, 375, 256, 224, 341, 256, 58, 16},
      {333, 500, 256, 224, 256, 384, 16, 80},  {375, 500, 224, 224, 224, 298, 0, 37},
      {101, 77, 64, 60, 83, 64, 12, 2},        {7, 9, 7, 5, 7, 9, 1, 2},
      {300, 300, 256, 224, 256, 256, 16, 16}};
  for (const auto& k : cases) {
    INFO(k[0] << "x" << k[1] << " -> " << k[2] << " -> " << k[3]);
    const auto g = short_side_crop(k[0], k[1], k[2], k[3]);
    CHECK(std::array<int64_t, 4>{g.height, g.width, g.top, g.left} == std::array<int64_t, 4>{k[4], k[5], k[6], k[7]});
  }
}

// ATEN_CPU_CAPABILITY, ATen's own cap, caps the data kernels too (data/vector_cap.hpp): read once
// per process, so a child process runs the check below under each value.
TEST_CASE("resize, normaliser and colour jitter paths under this process's ATEN_CPU_CAPABILITY (run by the next case)",
          "[.vector_cap]") {
  const char* v = std::getenv("ATEN_CPU_CAPABILITY");
  REQUIRE(v != nullptr);
  const int cap = std::string(v) == "avx2" ? 8 : 4;
  CHECK(resize_detail::filter_width_for_tests(16) <= cap);
  CHECK(byte_lookup_detail::level_for_tests(3) == 1);  // AVX-512 paths off: the scalar lookup
  CHECK(jitter_kernels::width() == 0);                   // the colour jitter's clones
  // the hue: AVX2 under avx2 where the CPU has it, never under default
  CHECK(jitter_kernels::hue_width() == (cap == 8 && jitter_kernels::cpu_has_avx2() ? 8 : 0));
  resize_detail::filter_width_for_tests(0);
  byte_lookup_detail::level_for_tests(0);
}

TEST_CASE("ATEN_CPU_CAPABILITY=avx2 or =default keeps the resize and the normaliser off AVX-512", "[unit]") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (const char* value : {"avx2", "default"}) {
    const auto r = trainer::test::run_shell(
        fmt::format("ATEN_CPU_CAPABILITY={} '{}' '[.vector_cap]'", value, self));
    INFO(value << ": " << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("All tests passed") != std::string::npos);
  }
}
