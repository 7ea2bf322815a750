// RandomResizedCrop and ColorJitter (data/crop_jitter.hpp) against torchvision's functional kernels
// (tests/reference/golden/recipes_ref.safetensors, from tests/reference/make_recipes_ref.py) and the
// sampled boxes against RandomResizedCrop.get_params' rules.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "data/crop_jitter.hpp"
#include "data/jitter_kernels.hpp"
#include "io/safetensors.hpp"
#include "test_util.hpp"

using namespace trainer::data;

namespace {

std::map<std::string, torch::Tensor> jitter_refs() {
  static const auto file =
      trainer::io::load_safetensors(trainer::test::source_path("tests/reference/golden/recipes_ref.safetensors"));
  std::map<std::string, torch::Tensor> m;
  for (const auto& [name, t] : file.tensors) m[name] = t;
  return m;
}

// Our result against torchvision's: at most 1 apart (float32 rounding at the truncation), and
// nearly every pixel exactly equal.
void check_close_image(const std::vector<uint8_t>& got, const torch::Tensor& want, double exact_fraction) {
  REQUIRE(static_cast<int64_t>(got.size()) == want.numel());
  const auto* w = want.data_ptr<uint8_t>();
  int64_t exact = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t d = std::abs(int64_t{got[i]} - int64_t{w[i]});
    worst = std::max(worst, d);
    exact += d == 0;
  }
  INFO("worst difference " << worst << ", " << exact << " of " << got.size() << " exact");
  CHECK(worst <= 1);
  CHECK(static_cast<double>(exact) >= exact_fraction * static_cast<double>(got.size()));
}

std::vector<uint8_t> bytes_of(const torch::Tensor& t) {
  const auto* p = t.data_ptr<uint8_t>();
  return {p, p + t.numel()};
}

}  // namespace

TEST_CASE("resized crop of a given box equals torchvision's resized_crop (antialias) within 1", "[unit]") {
  auto ref = jitter_refs();
  for (int k = 0; k < 4; ++k) {
    const auto box = ref.at("rrc" + std::to_string(k) + ".box");  // top, left, h, w, out_h, out_w
    const auto b = [&](int i) { return box[i].item<int64_t>(); };
    INFO("box " << k << ": " << b(0) << "," << b(1) << " " << b(2) << "x" << b(3) << " -> " << b(4) << "x" << b(5));
    for (const char* kind : {"rgb", "gray"}) {
      INFO(kind);
      const auto src = ref.at(std::string("img.") + kind);
      const int64_t c = src.size(0);
      std::vector<uint8_t> out(c * b(4) * b(5)), tmp;
      std::vector<float> scratch;
      resized_crop(src.data_ptr<uint8_t>(), c, src.size(1), src.size(2), CropBox{b(0), b(1), b(2), b(3)}, out.data(),
                   b(4), b(5), tmp, scratch);
      check_close_image(out, ref.at("rrc" + std::to_string(k) + "." + kind), 0.9);
    }
  }
}

TEST_CASE("brightness, contrast, saturation and hue equal torchvision's adjust_* on uint8 within 1", "[unit]") {
  auto ref = jitter_refs();
  const auto rgb = ref.at("img.rgb"), gray = ref.at("img.gray");
  const int64_t hw = rgb.size(1) * rgb.size(2);
  auto run = [&](const torch::Tensor& img, auto fn, double factor) {
    auto px = bytes_of(img);
    fn(px.data(), img.size(0), hw, factor);
    return px;
  };
  for (int k = 0; k < 2; ++k) {
    const auto key = std::to_string(k);
    const double fb = ref.at("brightness" + key + ".factor").item<double>();
    INFO("brightness " << fb);
    check_close_image(run(rgb, adjust_brightness, fb), ref.at("brightness" + key + ".rgb"), 0.99);
    check_close_image(run(gray, adjust_brightness, fb), ref.at("brightness" + key + ".gray"), 0.99);
    const double fc = ref.at("contrast" + key + ".factor").item<double>();
    INFO("contrast " << fc);
    check_close_image(run(rgb, adjust_contrast, fc), ref.at("contrast" + key + ".rgb"), 0.99);
    check_close_image(run(gray, adjust_contrast, fc), ref.at("contrast" + key + ".gray"), 0.99);
    const double fs = ref.at("saturation" + key + ".factor").item<double>();
    INFO("saturation " << fs);
    check_close_image(run(rgb, adjust_saturation, fs), ref.at("saturation" + key + ".rgb"), 0.99);
  }
  for (int k = 0; k < 3; ++k) {
    const auto key = std::to_string(k);
    const double fh = ref.at("hue" + key + ".factor").item<double>();
    INFO("hue " << fh);
    check_close_image(run(rgb, adjust_hue, fh), ref.at("hue" + key + ".rgb"), 0.95);
  }
  // a changed factor changes the image: the comparisons above are not of untouched copies
  CHECK(run(rgb, adjust_hue, 0.2) != bytes_of(rgb));
}

// The vector clones (AVX2 where the CPU has it) against the scalar formulas they replaced, bit for
// bit: float32 products summed in the same order, no FMA, clamped and truncated. Odd sizes leave
// a tail past every vector width; factors above 1 clamp at 255, below 1 at 0 never.
TEST_CASE("brightness, contrast and saturation equal their scalar formulas bit for bit at odd sizes", "[unit]") {
  const auto clamp_byte = [](float v) { return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f)); };
  for (const int64_t hw : {1, 7, 33, 37 * 29, 224 * 224 + 5}) {
    const auto img = torch::randint(0, 256, {3, hw}, torch::TensorOptions().dtype(torch::kUInt8));
    const auto px = bytes_of(img);
    std::vector<uint8_t> gray(hw);
    double mean = 0;
    for (int64_t i = 0; i < hw; ++i) {
      gray[i] = static_cast<uint8_t>(0.2989f * px[i] + 0.587f * px[hw + i] + 0.114f * px[2 * hw + i]);
      mean += gray[i];
    }
    mean /= static_cast<double>(hw);
    for (const double f : {0.6, 1.0, 1.37}) {
      INFO("hw " << hw << ", factor " << f);
      const float r = static_cast<float>(f), rest = static_cast<float>(1.0 - f);
      std::vector<uint8_t> want_b(px.size()), want_c(px.size()), want_s(px.size());
      for (size_t i = 0; i < px.size(); ++i) {
        want_b[i] = clamp_byte(r * px[i] + rest * 0.0f);
        want_c[i] = clamp_byte(r * px[i] + rest * static_cast<float>(mean));
        want_s[i] = clamp_byte(r * px[i] + rest * gray[i % static_cast<size_t>(hw)]);
      }
      auto b = px, c = px, sat = px;
      adjust_brightness(b.data(), 3, hw, f);
      adjust_contrast(c.data(), 3, hw, f);
      adjust_saturation(sat.data(), 3, hw, f);
      CHECK(b == want_b);
      CHECK(c == want_c);
      CHECK(sat == want_s);
    }
  }
}

// Each path this CPU has (AVX-512, and the clones, which dispatch leaves for the tails) on its own.
TEST_CASE("the colour jitter's AVX-512 loops and clones give the scalar bytes at every length", "[unit]") {
  namespace jk = trainer::data::jitter_kernels;
  std::vector<int> widths = {0};
  if (jk::cpu_has_avx512()) widths.push_back(16);
  const auto byte_of = [](float v) { return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f)); };
  for (int w : widths)
    for (int64_t n = 0; n <= 70; ++n) {
      INFO("width " << w << ", n " << n);
      const auto t = torch::randint(0, 256, {4, n}, torch::TensorOptions().dtype(torch::kUInt8));
      const uint8_t *a = t.data_ptr<uint8_t>(), *o = a + n, *g = o + n, *b = g + n;
      std::vector<uint8_t> with(a, a + n), alone(a, a + n), gray(n), want_with(n), want_alone(n), want_gray(n);
      for (int64_t i = 0; i < n; ++i) {
        want_with[i] = byte_of(1.37f * a[i] + -0.37f * o[i]);
        want_alone[i] = byte_of(0.61f * a[i] + 47.3f);
        want_gray[i] = static_cast<uint8_t>(0.2989f * a[i] + 0.587f * g[i] + 0.114f * b[i]);
      }
      jk::blend_at(w, with.data(), o, n, 1.37f, -0.37f, 0.0f);
      jk::blend_at(w, alone.data(), nullptr, n, 0.61f, 0.0f, 47.3f);
      jk::gray_at(w, a, g, b, gray.data(), n);
      CHECK(with == want_with);
      CHECK(alone == want_alone);
      CHECK(gray == want_gray);
    }
}

// The hue kernel's paths against the scalar code they replaced (branches, fmod, floor, a table of
// sectors), on every 24-bit colour at shifts that reach both ends of the circle and the wrap of
// (h + shift) - floor(h + shift) onto 1.0, and at lengths that leave a tail past each vector width.
void hue_reference(uint8_t* img, int64_t hw, float shift) {
  for (int64_t i = 0; i < hw; ++i) {
    const float r = img[i] / 255.0f, g = img[hw + i] / 255.0f, b = img[2 * hw + i] / 255.0f;
    const float maxc = std::max({r, g, b}), minc = std::min({r, g, b});
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : cr;
    const float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    float hv = 0;
    if (maxc == r) hv = bc - gc;
    else if (maxc == g) hv = 2.0f + rc - bc;
    else hv = 4.0f + gc - rc;
    hv = std::fmod(hv / 6.0f + 1.0f, 1.0f);
    hv = hv + shift;
    hv = hv - std::floor(hv);
    const float v = maxc;
    const float fi = std::floor(hv * 6.0f), f = hv * 6.0f - fi;
    const int sector = ((static_cast<int>(fi) % 6) + 6) % 6;
    const float p = std::clamp(v * (1.0f - s), 0.0f, 1.0f), q = std::clamp(v * (1.0f - s * f), 0.0f, 1.0f),
                t = std::clamp(v * (1.0f - s * (1.0f - f)), 0.0f, 1.0f);
    const float rgb[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
    for (int c = 0; c < 3; ++c) img[c * hw + i] = static_cast<uint8_t>(std::min(rgb[sector][c] * 255.999f, 255.0f));
  }
}

TEST_CASE("the hue kernel's AVX-512, AVX2 and scalar loops give the replaced code's bytes for every colour", "[unit]") {
  namespace jk = trainer::data::jitter_kernels;
  std::vector<int> widths = {0};
  if (jk::cpu_has_avx2()) widths.push_back(8);
  if (jk::cpu_has_avx512()) widths.push_back(16);
  const int64_t n = int64_t{1} << 24;
  std::vector<uint8_t> all(3 * n);
  for (int64_t i = 0; i < n; ++i) {
    all[i] = static_cast<uint8_t>(i >> 16);
    all[n + i] = static_cast<uint8_t>(i >> 8);
    all[2 * n + i] = static_cast<uint8_t>(i);
  }
  for (const float shift : {0.5f, -0.5f, 0.1f, -0.1f, -1e-9f, 0.0f, 0.3333333f}) {
    auto want = all;
    hue_reference(want.data(), n, shift);
    for (int w : widths) {
      INFO("width " << w << ", shift " << shift);
      auto got = all;
      jk::hue_at(w, got.data(), got.data() + n, got.data() + 2 * n, n, shift);
      int64_t differ = 0, first = -1;
      for (int64_t i = 0; i < 3 * n; ++i)
        if (got[i] != want[i] && differ++ == 0) first = i;
      INFO(differ << " bytes differ, the first at " << first);
      CHECK(differ == 0);
    }
  }
  for (int w : widths)
    for (int64_t len = 0; len <= 40; ++len) {
      INFO("width " << w << ", n " << len);
      const auto t = torch::randint(0, 256, {3, len}, torch::TensorOptions().dtype(torch::kUInt8));
      std::vector<uint8_t> got(t.data_ptr<uint8_t>(), t.data_ptr<uint8_t>() + 3 * len), want = got;
      hue_reference(want.data(), len, 0.27f);
      jk::hue_at(w, got.data(), got.data() + len, got.data() + 2 * len, len, 0.27f);
      CHECK(got == want);
    }
}

TEST_CASE("RandomResizedCrop boxes: area within scale, aspect ratio within ratio, inside the image", "[unit]") {
  const std::vector<double> scale = {0.08, 1.0}, ratio = {3.0 / 4.0, 4.0 / 3.0};
  const int64_t h = 240, w = 320;
  int64_t small = 0, wide = 0, tall = 0;
  for (int64_t i = 0; i < 4000; ++i) {
    auto rng = make_rng(RngStream::ResizedCrop, 0, 0, i);
    const auto b = sample_resized_crop(h, w, scale, ratio, rng);
    REQUIRE(b.top >= 0);
    REQUIRE(b.left >= 0);
    REQUIRE(b.top + b.height <= h);
    REQUIRE(b.left + b.width <= w);
    // the rounded box: its side is the rounded root, so area and ratio hold up to half a pixel per side
    const double area = static_cast<double>(b.height * b.width) / static_cast<double>(h * w);
    const double ar = static_cast<double>(b.width) / static_cast<double>(b.height);
    REQUIRE(area >= scale[0] * 0.95);
    REQUIRE(area <= scale[1] * 1.0001);
    REQUIRE(ar >= ratio[0] * (1 - 1.0 / b.height) - 1e-9);
    REQUIRE(ar <= ratio[1] * (1 + 1.0 / b.height) + 1e-9);
    small += area < 0.3;
    wide += ar > 1.15;
    tall += ar < 0.87;
  }
  // uniform area in [0.08, 1]: about a quarter below 0.3; log-uniform ratio: both ends drawn
  CHECK(small > 700);
  CHECK(wide > 600);
  CHECK(tall > 600);
  auto a = make_rng(RngStream::ResizedCrop, 0, 2, 9), b = make_rng(RngStream::ResizedCrop, 0, 2, 9);
  CHECK(sample_resized_crop(h, w, scale, ratio, a) == sample_resized_crop(h, w, scale, ratio, b));  // per sample
}

TEST_CASE("RandomResizedCrop falls back to the centre crop with the ratio clamped", "[unit]") {
  auto rng = make_rng(RngStream::ResizedCrop, 0, 0, 0);
  // a 10x100 strip cannot hold a square of 90 % of its area: 10 failed attempts, then the centre
  CHECK(sample_resized_crop(10, 100, {0.9, 1.0}, {1.0, 1.0}, rng) == CropBox{0, 45, 10, 10});
  CHECK(sample_resized_crop(100, 10, {0.9, 1.0}, {1.0, 1.0}, rng) == CropBox{45, 0, 10, 10});
  // within the ratio range: the whole image
  CHECK(sample_resized_crop(10, 12, {1.5, 2.0}, {0.5, 2.0}, rng) == CropBox{0, 0, 10, 12});
}

TEST_CASE("ColorJitter draws: factors in torchvision's ranges, a permutation of the four", "[unit]") {
  trainer::config::AugmentConfig cfg;
  cfg.brightness = 0.4;
  cfg.contrast = 1.5;  // the lower end is clamped at 0
  cfg.saturation = 0.4;
  cfg.hue = 0.1;
  std::set<std::array<int, 4>> orders;
  double lowest_contrast = 1;
  for (int64_t i = 0; i < 2000; ++i) {
    auto rng = make_rng(RngStream::ColorJitter, 1, 0, i);
    const auto c = sample_jitter(cfg, rng);
    auto sorted = c.order;
    std::sort(sorted.begin(), sorted.end());
    REQUIRE(sorted == std::array<int, 4>{0, 1, 2, 3});
    orders.insert(c.order);
    REQUIRE(c.brightness >= 0.6);
    REQUIRE(c.brightness <= 1.4);
    REQUIRE(c.contrast >= 0.0);
    REQUIRE(c.contrast <= 2.5);
    REQUIRE(std::abs(c.hue) <= 0.1);
    lowest_contrast = std::min(lowest_contrast, c.contrast);
  }
  CHECK(orders.size() == 24);  // every order of the four adjustments occurs
  CHECK(lowest_contrast < 0.05);
}
