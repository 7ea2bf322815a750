// Image transforms against hand-computed results and against torch's antialiased interpolate.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "data/transforms.hpp"

using namespace trainer::data;

namespace {
std::vector<uint8_t> ramp(int64_t c, int64_t h, int64_t w) {
  std::vector<uint8_t> v(c * h * w);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(1 + i);
  return v;
}
}  // namespace

TEST_CASE("transforms: horizontal flip mirrors every row", "[unit]") {
  auto src = ramp(2, 3, 4);
  std::vector<uint8_t> dst(src.size());
  AugmentChoice a;
  a.flip = true;
  apply_augment(src.data(), 2, 3, 4, 0, a, dst.data());
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x) CHECK(dst[(c * 3 + y) * 4 + x] == src[(c * 3 + y) * 4 + (3 - x)]);
}

TEST_CASE("transforms: crop with padding shifts the image and fills zeros", "[unit]") {
  auto src = ramp(1, 4, 4);
  std::vector<uint8_t> dst(src.size());
  AugmentChoice a;
  a.crop_y = 0;  // padding 2: source row = y - 2
  a.crop_x = 4;  // source column = x + 2
  apply_augment(src.data(), 1, 4, 4, 2, a, dst.data());
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) {
      int sy = y - 2, sx = x + 2;
      uint8_t want = (sy >= 0 && sx < 4) ? src[sy * 4 + sx] : 0;
      CHECK(dst[y * 4 + x] == want);
    }
}

TEST_CASE("transforms: rotation by 90 degrees is counter-clockwise and exact", "[unit]") {
  auto src = ramp(1, 5, 5);
  std::vector<uint8_t> dst(src.size());
  AugmentChoice a;
  a.angle_deg = 90.0;
  apply_augment(src.data(), 1, 5, 5, 0, a, dst.data());
  // counter-clockwise: the source's right column becomes the top row
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 5; ++x) CHECK(dst[y * 5 + x] == src[x * 5 + (4 - y)]);
}

TEST_CASE("transforms: augment choices depend only on (seed, epoch, index)", "[unit]") {
  trainer::config::AugmentConfig cfg;
  cfg.crop_padding = 4;
  cfg.hflip = true;
  cfg.rotation_degrees = 15;
  auto r1 = make_rng(RngStream::Augment, 1, 2, 3), r2 = make_rng(RngStream::Augment, 1, 2, 3);
  auto a = sample_augment(cfg, r1), b = sample_augment(cfg, r2);
  CHECK(a.crop_x == b.crop_x);
  CHECK(a.crop_y == b.crop_y);
  CHECK(a.flip == b.flip);
  CHECK(a.angle_deg == b.angle_deg);
  CHECK(std::abs(a.angle_deg) <= 15.0);
  CHECK(a.crop_x <= 8);
  int flips = 0;
  for (int i = 0; i < 1000; ++i) {
    auto r = make_rng(RngStream::Augment, 1, 0, i);
    flips += sample_augment(cfg, r).flip;
  }
  CHECK(flips > 430);  // p = 0.5: 1000 draws land in [430, 570] with probability > 0.9999
  CHECK(flips < 570);
}

TEST_CASE("transforms: resize matches torch's antialiased bilinear interpolate", "[unit]") {
  torch::manual_seed(0);
  auto img = torch::randint(0, 256, {3, 37, 50}, torch::kUInt8);
  for (auto [h, w] : std::vector<std::pair<int64_t, int64_t>>{{18, 25}, {10, 13}, {60, 80}}) {
    std::vector<uint8_t> out(3 * h * w);
    std::vector<float> scratch;
    resize_bilinear(img.data_ptr<uint8_t>(), 3, 37, 50, out.data(), h, w, scratch);
    auto ref = torch::nn::functional::interpolate(
        img.to(torch::kFloat).unsqueeze(0),
        torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{h, w}).mode(torch::kBilinear)
            .align_corners(false).antialias(true))[0];
    auto mine = torch::from_blob(out.data(), {3, h, w}, torch::kUInt8).to(torch::kFloat);
    CHECK((mine - ref).abs().max().item<double>() <= 1.0);  // rounding to bytes only
  }
}

TEST_CASE("transforms: normalizer tables", "[unit]") {
  Normalizer n("mean_std", 2, {0.5, 0.25}, {0.5, 0.125});
  uint8_t src[4] = {0, 255, 51, 102};  // (1, 2, 1, 2)
  float dst[4];
  n.apply(src, dst, 1, 2, 2);
  CHECK(dst[0] == Approx(-1.0f));
  CHECK(dst[1] == Approx(1.0f));
  CHECK(dst[2] == Approx((0.2 - 0.25) / 0.125));
  CHECK(dst[3] == Approx((0.4 - 0.25) / 0.125));
  Normalizer none;
  none.apply(src, dst, 1, 2, 2);
  CHECK(dst[1] == 1.0f);
}
