// The kinds of image file a real folder holds (issue 27: CMYK, greyscale, progressive, EXIF-tagged
// JPEGs, PNGs with alpha or a palette, tiny images) decode to the pixels PIL gives, which is what
// torchvision's ImageFolder trains on: tests/reference/make_image_kinds.py writes them with PIL
// beside PIL's decoded bytes. A JPEG whose data ends early is refused as PIL refuses it.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/dataset.hpp"
#include "data/image_decode.hpp"
#include "skip.hpp"
#include "test_util.hpp"

using namespace trainer;
using namespace trainer::data;
using namespace trainer::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// PIL's (H, W, C) bytes, the box [top, top + h) x [left, left + w) of them, as planes (C, h, w)
std::vector<uint8_t> pil_planes(const std::vector<uint8_t>& hwc, int64_t width, int64_t c, const CropBox& b) {
  std::vector<uint8_t> out(static_cast<size_t>(c * b.height * b.width));
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < b.height; ++y)
      for (int64_t x = 0; x < b.width; ++x)
        out[static_cast<size_t>((k * b.height + y) * b.width + x)] =
            hwc[static_cast<size_t>(((b.top + y) * width + b.left + x) * c + k)];
  return out;
}

int64_t differing(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

}  // namespace

TEST_CASE("image kinds: every JPEG and PNG kind decodes, whole and by region, to PIL's pixels", "[unit]") {
  if (!fs::exists(venv_bin("python"))) TRAINER_SKIP("no Python environment at " << venv_bin("python"));
  const auto dir = scratch_dir("image_kinds");
  const auto gen = run_shell("\"" + venv_bin("python") + "\" " + source_path("tests/reference/make_image_kinds.py") + " " +
                             dir.string());
  INFO(gen.output);
  REQUIRE(gen.exit_code == 0);
  const auto manifest = nlohmann::json::parse(read_file(dir / "manifest.json"));
  REQUIRE(manifest.size() >= 16);
  for (const auto& [name, e] : manifest.items()) {
    const std::string file = e["file"];
    const int64_t h = e["height"], w = e["width"];
    for (int64_t c : {3, 1}) {
      INFO(name << " (PIL mode " << e["mode"].get<std::string>() << ") as " << c << " channel(s)");
      const auto pil = file_bytes(e[c == 3 ? "rgb" : "l"]);
      REQUIRE(pil.size() == static_cast<size_t>(h * w * c));
      std::vector<uint8_t> out, inter;
      const auto img = decode_image(file, c, 0, out, inter);
      CHECK(img.height == h);
      CHECK(img.width == w);
      CHECK(differing(out, pil_planes(pil, w, c, CropBox{0, 0, h, w})) == 0);
      // RandomResizedCrop's path at scale 1 (the output as large as the box): the box's pixels of the
      // whole decode, whatever the chroma layout (jpeg_crop_scanline's cut edges) or scan order
      const std::vector<CropBox> boxes{{0, 0, h, w}, {h / 3, w / 4, h / 2, w / 2}, {1, w - w / 3 - 1, h - 2, w / 3},
                                       {h - h / 4, 3, h / 4, w / 5 + 1}};
      for (const auto& b : boxes) {
        if (b.height < 1 || b.width < 1) continue;
        INFO("box {" << b.top << ", " << b.left << ", " << b.height << ", " << b.width << "}");
        const auto r = decode_image_region(file, c, [&](int64_t, int64_t) { return b; }, b.height, b.width, out, inter);
        CHECK(r.scale == 1);
        CHECK(differing(out, pil_planes(pil, w, c, b)) == 0);
      }
    }
  }
}

TEST_CASE("image kinds: CMYK and YCCK JPEGs (Adobe's inverted bytes) decode to PIL's conversion of their inks", "[unit]") {
  // without Python: the trainer's own writer stores CMYK as Photoshop does; PIL's CMYK -> RGB of the
  // stored bytes s is R = s_k - round((255 - s_c) * s_k / 255), within the JPEG's loss at quality 100
  const auto dir = scratch_dir("image_kinds_cmyk");
  const int64_t h = 40, w = 56;
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 4));
  for (int64_t i = 0; i < h * w; ++i)
    for (int64_t k = 0; k < 4; ++k) px[static_cast<size_t>(i * 4 + k)] = static_cast<uint8_t>((i / w * 5 + i % w * 3 + 60 * k) % 256);
  JpegLayout layout;
  layout.quality = 100;
  layout.luma_h = layout.luma_v = 1;
  for (bool ycck : {false, true}) {
    layout.ycck = ycck;
    const std::string file = (dir / (ycck ? "ycck.jpg" : "cmyk.jpg")).string();
    write_jpeg(file, px.data(), h, w, 4, layout);
    std::vector<uint8_t> out, inter;
    decode_image(file, 3, 0, out, inter);
    double diff = 0, inverted_diff = 0;
    for (int64_t i = 0; i < h * w; ++i)
      for (int64_t k = 0; k < 3; ++k) {
        const int s = px[static_cast<size_t>(i * 4 + k)], sk = px[static_cast<size_t>(i * 4 + 3)];
        const int want = sk - ((255 - s) * sk + 127) / 255, naive = (255 - s) * (255 - sk) / 255;
        diff += std::abs(out[static_cast<size_t>(k * h * w + i)] - want);
        inverted_diff += std::abs(out[static_cast<size_t>(k * h * w + i)] - naive);
      }
    INFO((ycck ? "YCCK" : "CMYK") << ": mean abs diff " << diff / (h * w * 3) << ", against uninverted inks "
                                  << inverted_diff / (h * w * 3));
    CHECK(diff / (h * w * 3) <= 2.0);
    CHECK(inverted_diff / (h * w * 3) >= 20.0);  // the convention matters: the other one is far off
  }
}

TEST_CASE("image kinds: a JPEG cut short is refused naming the file, one with stray bytes decodes", "[unit]") {
  const auto dir = scratch_dir("image_kinds_cut");
  const int64_t h = 96, w = 80;
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 3));
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 7 + i / 240 * 13) % 256);
  for (bool progressive : {false, true}) {
    JpegLayout layout;
    layout.progressive = progressive;
    const std::string good = (dir / (progressive ? "p.jpg" : "b.jpg")).string();
    write_jpeg(good, px.data(), h, w, 3, layout);
    const auto bytes = file_bytes(good);
    std::vector<uint8_t> whole, inter;
    decode_image(good, 3, 0, whole, inter);
    const auto all = [](int64_t hh, int64_t ww) { return CropBox{0, 0, hh, ww}; };
    // PIL refuses each of these ("image file is truncated"), the end marker alone missing included
    for (size_t keep : {bytes.size() - 2, bytes.size() - 1, bytes.size() - 40, bytes.size() / 2, size_t{700}}) {
      INFO((progressive ? "progressive" : "baseline") << ", the first " << keep << " of " << bytes.size() << " bytes");
      const std::string cut = (dir / ("cut_" + std::to_string(keep) + ".jpg")).string();
      std::ofstream(cut, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(keep));
      std::vector<uint8_t> out;
      CHECK_THROWS_WITH(decode_image(cut, 3, 0, out, inter), Contains(cut) && Contains("cannot decode JPEG"));
      CHECK_THROWS_WITH(decode_image_region(cut, 3, all, 32, 32, out, inter), Contains(cut) && Contains("cannot decode JPEG"));
      if (keep == bytes.size() - 2)
        CHECK_THROWS_WITH(decode_image(cut, 3, 0, out, inter), Contains("the file ends before its image data does (truncated)"));
    }
    // stray bytes before the end marker: libjpeg warns ("extraneous bytes"), PIL and we decode
    std::vector<uint8_t> stray(bytes.begin(), bytes.end() - 2);
    for (uint8_t b : {0x00, 0x13, 0x37, 0xFF, 0xD9}) stray.push_back(b);
    const std::string stray_file = (dir / (progressive ? "stray_p.jpg" : "stray_b.jpg")).string();
    std::ofstream(stray_file, std::ios::binary).write(reinterpret_cast<const char*>(stray.data()), static_cast<std::streamsize>(stray.size()));
    std::vector<uint8_t> out;
    decode_image(stray_file, 3, 0, out, inter);
    CHECK(out == whole);
  }
  // a baseline JPEG cut below the box's rows: the box's data is all there, its pixels are real
  const std::string tall = (dir / "tall.jpg").string();
  std::vector<uint8_t> big(static_cast<size_t>(400 * 64 * 3));
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>((i * 5 + i / 192 * 11) % 256);
  write_jpeg(tall, big.data(), 400, 64, 3, 90);
  const auto tb = file_bytes(tall);
  const std::string tall_cut = (dir / "tall_cut.jpg").string();
  std::ofstream(tall_cut, std::ios::binary).write(reinterpret_cast<const char*>(tb.data()), static_cast<std::streamsize>(tb.size() * 3 / 4));
  const CropBox top{0, 0, 48, 64};
  std::vector<uint8_t> a, b, inter;
  decode_image_region(tall, 3, [&](int64_t, int64_t) { return top; }, 48, 64, a, inter);
  decode_image_region(tall_cut, 3, [&](int64_t, int64_t) { return top; }, 48, 64, b, inter);
  CHECK(a == b);
  std::vector<uint8_t> out;
  CHECK_THROWS_WITH(decode_image(tall_cut, 3, 0, out, inter), Contains("truncated"));
}
