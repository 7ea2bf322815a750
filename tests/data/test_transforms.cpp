// Image transforms against hand-computed results and against torch's antialiased interpolate.
#include <catch2/catch.hpp>

#include <set>

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
  // rows shorter than a vector, of a vector's odd multiple plus a tail, and the 224 of ImageNet
  for (int w : {4, 37, 224}) {
    auto src = ramp(2, 3, w);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(src[i] * 7 + i);  // distinct neighbours
    std::vector<uint8_t> dst(src.size());
    AugmentChoice a;
    a.flip = true;
    apply_augment(src.data(), 2, 3, w, 0, a, dst.data());
    int wrong = 0;
    for (int c = 0; c < 2; ++c)
      for (int y = 0; y < 3; ++y)
        for (int x = 0; x < w; ++x) wrong += dst[(c * 3 + y) * w + x] != src[(c * 3 + y) * w + (w - 1 - x)];
    INFO("width " << w);
    CHECK(wrong == 0);
  }
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

TEST_CASE("transforms: the normalizer's vector lookup gives its table's values at any length and alignment", "[unit]") {
  // every path this CPU runs (AVX512-VBMI byte permutes, AVX-512 gathers, scalar; streamed stores
  // from a 64-byte boundary) against the table, bit for bit: planes of a length that is no multiple
  // of 16 or 64, written from an unaligned address, and a plane shorter than one vector
  std::set<int> levels;
  for (int want : {3, 2, 1}) levels.insert(byte_lookup_detail::level_for_tests(want));
  for (int level : levels)
    for (int64_t hw : {1000 + 7, 50, 5}) {
      byte_lookup_detail::level_for_tests(level);
      INFO("lookup path " << level << ", planes of " << hw);
      const int64_t batch = 2, channels = 3, n = batch * channels * hw;
      Normalizer norm("mean_std", channels, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
      const auto table = norm.table(channels);
      std::vector<uint8_t> src(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) src[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 2654435761u) >> 13);
      for (int64_t shift : {0, 1, 5, 16}) {
        std::vector<float> buf(static_cast<size_t>(n + 32), -7.0f);
        float* dst = buf.data() + shift;
        norm.apply(src.data(), dst, batch, channels, hw);
        int64_t wrong = 0;
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t c = 0; c < channels; ++c)
            for (int64_t i = 0; i < hw; ++i) {
              const int64_t k = (b * channels + c) * hw + i;
              wrong += dst[k] != table[static_cast<size_t>(c * 256 + src[static_cast<size_t>(k)])];
            }
        INFO("dst offset " << shift << " floats");
        CHECK(wrong == 0);
        CHECK(buf[static_cast<size_t>(n + shift)] == -7.0f);  // nothing written past the end
        if (shift > 0) CHECK(buf[static_cast<size_t>(shift - 1)] == -7.0f);
      }
    }
  byte_lookup_detail::level_for_tests(0);
  CHECK(levels.count(1) == 1);  // the scalar path runs everywhere
}

TEST_CASE("transforms: the alternating flip turns every image over each epoch, half of them at a time", "[unit]") {
  int flipped_at_0 = 0;
  for (int64_t index = 0; index < 1000; ++index) {
    const bool first = alternating_flip(7, 0, index);
    flipped_at_0 += first;
    for (int64_t epoch = 1; epoch < 6; ++epoch) {
      INFO("image " << index << ", epoch " << epoch);
      CHECK(alternating_flip(7, epoch, index) == (first != (epoch % 2 == 1)));
    }
  }
  CHECK(flipped_at_0 > 430);  // p = 0.5 per epoch: 1000 coins land in [430, 570] with probability > 0.9999
  CHECK(flipped_at_0 < 570);
  int same_as_seed_7 = 0;  // another seed draws other coins
  for (int64_t index = 0; index < 1000; ++index) same_as_seed_7 += alternating_flip(8, 0, index) == alternating_flip(7, 0, index);
  CHECK(same_as_seed_7 > 430);
  CHECK(same_as_seed_7 < 570);
}

TEST_CASE("transforms: hflip_alternate replaces only the flip of a sample's choices", "[unit]") {
  trainer::config::AugmentConfig cfg;
  cfg.crop_padding = 2;
  cfg.hflip = true;
  cfg.rotation_degrees = 10.0;
  auto alternate = cfg;
  alternate.hflip_alternate = true;
  int differs = 0;
  for (int64_t index = 0; index < 200; ++index)
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      INFO("image " << index << ", epoch " << epoch);
      SampleRng rng = make_rng(RngStream::Augment, 5, epoch, index);
      const AugmentChoice drawn = sample_augment(cfg, rng);
      const AugmentChoice plain = augment_choice(cfg, 5, epoch, index);
      const AugmentChoice alt = augment_choice(alternate, 5, epoch, index);
      CHECK(plain.flip == drawn.flip);  // without the option: the Augment stream's coin
      CHECK(plain.crop_y == drawn.crop_y);
      CHECK(plain.crop_x == drawn.crop_x);
      CHECK(plain.angle_deg == drawn.angle_deg);
      CHECK(alt.flip == alternating_flip(5, epoch, index));
      CHECK(alt.crop_y == drawn.crop_y);  // the other draws stay as they are
      CHECK(alt.crop_x == drawn.crop_x);
      CHECK(alt.angle_deg == drawn.angle_deg);
      differs += alt.flip != plain.flip;
    }
  CHECK(differs > 0);  // the two flips are different coins
}
