// Fuzz-style tests, one per reader: files with random and extreme header fields (seeded, a few
// hundred cases each). Each case predicts whether the file is valid: a valid one must load with the
// shape its header gives, an invalid one must throw a DataError whose message starts with the file's
// path. Anything else (another exception, a crash, an allocation the size of a lying header) fails.
// The same file is built with AddressSanitizer + UBSan as test_asan_readers (tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <zlib.h>

#include <random>

#include "data/dataset.hpp"
#include "fixtures.hpp"
#include "hostile_util.hpp"

using namespace trainer;
using namespace trainer::test;
using data::DataError;

namespace {

using Rng = std::mt19937_64;

// Header values a fuzzer likes: boundaries of 8/16/32-bit arithmetic, zero, small, random.
uint32_t extreme_u32(Rng& rng, uint32_t small_max) {
  static const uint32_t kEdges[] = {0, 1, 2, 255, 256, 65535, 65536, 0x7fffffffu, 0x80000000u, 0xffffffffu};
  switch (rng() % 6) {  // small values most often, so that consistent headers come up too
    case 0: return kEdges[rng() % std::size(kEdges)];
    case 1: return static_cast<uint32_t>(rng());
    default: return static_cast<uint32_t>(rng() % (small_max + 1));
  }
}

std::string random_bytes(Rng& rng, size_t n, int max_value = 255) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() % (max_value + 1));
  return s;
}


// "" when create_datasets succeeds (and `check` passes), else the DataError's message. Any other
// exception fails the test.
std::string fuzz_open(const config::DataConfig& d, const config::ModelConfig& m,
                       const std::function<void(const data::DatasetPair&)>& check) {
  try {
    auto pair = data::create_datasets(d, m, 0);
    check(pair);
  } catch (const DataError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("not a DataError: " << e.what());
  }
  return "";
}

bool names_one_of(const std::string& msg, const std::vector<fs::path>& files) {
  for (const auto& f : files)
    if (starts_with(msg, f.string() + ": ")) return true;
  return false;
}

}  // namespace

TEST_CASE("fuzz: IDX headers with random dims load exactly when consistent, else fail naming the file", "[unit]") {
  Rng rng(18005);
  auto dir = scratch_dir("fuzz_idx");
  int loaded = 0;
  for (int i = 0; i < 400; ++i) {
    const bool gz = rng() % 2;
    const uint32_t magic_i = rng() % 8 ? 0x803 : extreme_u32(rng, 0x900), magic_l = rng() % 8 ? 0x801 : 0x803;
    const uint32_t n = extreme_u32(rng, 6), h = extreme_u32(rng, 9), w = extreme_u32(rng, 9);
    const uint32_t nl = rng() % 4 ? n : extreme_u32(rng, 6);
    uint64_t nh = 0, want = 0;
    const bool fits = !__builtin_mul_overflow(uint64_t{n}, uint64_t{h}, &nh) && !__builtin_mul_overflow(nh, uint64_t{w}, &want);
    size_t len = rng() % 600;  // data bytes written: often exactly what the header says
    if (fits && want <= 600 && rng() % 3) len = static_cast<size_t>(want) + (rng() % 4 == 0 ? 1 : 0);
    size_t nlab = rng() % 4 ? std::min<size_t>(nl, 600) : rng() % 8;
    std::string labels = random_bytes(rng, nlab, rng() % 4 ? 9 : 12);
    const std::string ext = gz ? ".gz" : "";
    const fs::path img = dir / ("train-images-idx3-ubyte" + ext), lab = dir / ("train-labels-idx1-ubyte" + ext);
    fs::remove(dir / "train-images-idx3-ubyte"), fs::remove(dir / "train-images-idx3-ubyte.gz");
    fs::remove(dir / "train-labels-idx1-ubyte"), fs::remove(dir / "train-labels-idx1-ubyte.gz");
    write_maybe_gz(img, be32(magic_i) + be32(n) + be32(h) + be32(w) + random_bytes(rng, len), gz);
    write_maybe_gz(lab, be32(magic_l) + be32(nl) + labels, gz);

    const bool labels_ok = labels.find_first_of(std::string("\x0a\x0b\x0c", 3)) == std::string::npos;
    const bool valid = magic_i == 0x803 && magic_l == 0x801 && n == nl && n > 0 && h > 0 && w > 0 && fits &&
                       len == want && nlab == nl && labels_ok;
    INFO("case " << i << ": magic " << magic_i << "/" << magic_l << ", dims " << n << "x" << h << "x" << w
                 << ", labels " << nl << ", wrote " << len << " + " << nlab << " bytes, gz " << gz);
    std::string err = fuzz_open(test::plain_data_cfg("idx", dir), resnet(1, 10), [&](const data::DatasetPair& p) {
      CHECK(p.train->size() == n);
      CHECK(p.train->sample_shape() == std::vector<int64_t>{1, h, w});
      CHECK(p.train->get(n - 1, 0, false).target.item<int64_t>() == static_cast<uint8_t>(labels[n - 1]));
    });
    INFO("error: " << err);
    CHECK(err.empty() == valid);
    if (!err.empty()) CHECK(names_one_of(err, {img, lab}));
    loaded += err.empty();
  }
  CHECK(loaded >= 10);  // the fuzzer also exercises the success path
}

TEST_CASE("fuzz: CIFAR files of random length and labels load exactly when whole records, else fail naming the file",
          "[unit]") {
  Rng rng(18006);
  auto dir = scratch_dir("fuzz_cifar");
  constexpr size_t kRecord = 3073;
  for (int i = 0; i < 120; ++i) {
    const bool gz = rng() % 2;
    size_t records = rng() % 4, len = records * kRecord;
    if (rng() % 3 == 0) len = rng() % 2 ? len + 1 + rng() % 3 : rng() % (4 * kRecord);
    std::string bytes = random_bytes(rng, len);
    bool labels_ok = true;
    for (size_t r = 0; r * kRecord < len; ++r) {
      bytes[r * kRecord] = static_cast<char>(rng() % 8 ? rng() % 10 : 10 + rng() % 246);
      labels_ok &= static_cast<uint8_t>(bytes[r * kRecord]) < 10;
    }
    const fs::path file = dir / "data_batch_1.bin";
    write_maybe_gz(file, bytes, gz);  // gzip'd under the plain name: told apart by the magic
    const bool valid = len > 0 && len % kRecord == 0 && labels_ok;
    INFO("case " << i << ": " << len << " bytes, gz " << gz);
    std::string err = fuzz_open(test::plain_data_cfg("cifar", file), resnet(3, 10), [&](const data::DatasetPair& p) {
      CHECK(p.train->size() == static_cast<int64_t>(len / kRecord));
      CHECK(p.train->get(0, 0, false).target.item<int64_t>() == static_cast<uint8_t>(bytes[0]));
    });
    INFO("error: " << err);
    CHECK(err.empty() == valid);
    if (!err.empty()) CHECK(names_one_of(err, {file}));
  }
}

TEST_CASE("fuzz: token shards with random llm.c headers and token values, out-of-range ids failing at open", "[unit]") {
  Rng rng(18007);
  auto dir = scratch_dir("fuzz_tokens");
  const int64_t vocab = 300, block = 4;
  int loaded = 0;
  for (int i = 0; i < 300; ++i) {
    const int kind = rng() % 3;  // 0: llm.c, 1: nanoGPT headerless, 2: llm.c uint32 magic
    const size_t n = rng() % 40;
    std::vector<uint16_t> toks(n);
    const bool out_of_range = rng() % 3 == 0;
    for (auto& t : toks) t = static_cast<uint16_t>(rng() % vocab);
    if (out_of_range && n > 0) toks[rng() % n] = static_cast<uint16_t>(vocab + rng() % (65536 - vocab));
    std::string body(reinterpret_cast<const char*>(toks.data()), 2 * n);
    if (rng() % 5 == 0) body += random_bytes(rng, rng() % 2 ? 1 : 3);  // a torn (odd) tail
    uint32_t version = rng() % 6 ? 1 : extreme_u32(rng, 3), count = rng() % 3 ? uint32_t(n) : extreme_u32(rng, 50);
    std::string file_bytes = body;
    if (kind != 1) {
      std::string header(1024, '\0');
      const uint32_t fields[3] = {kind == 0 ? 20240520u : 20240801u, version, count};
      std::memcpy(header.data(), fields, sizeof fields);
      file_bytes = header + body;
    }
    const fs::path file = dir / "shard.bin";
    write_file(file, file_bytes);
    const bool whole = kind == 0 ? version == 1 && body.size() == 2 * uint64_t{count} : kind == 1 && body.size() % 2 == 0;
    const size_t tokens = kind == 0 ? count : body.size() / 2;
    const bool valid = whole && !(out_of_range && n > 0) && tokens >= static_cast<size_t>(block + 1);
    INFO("case " << i << ": kind " << kind << ", version " << version << ", count " << count << ", " << n
                 << " tokens, body " << body.size() << " bytes, out of range " << out_of_range);
    std::string err = fuzz_open(test::plain_data_cfg("tokens", file), gpt(block, vocab), [&](const data::DatasetPair& p) {
      auto ex = p.train->get(0, 0, false);
      for (int64_t k = 0; k < block; ++k) CHECK(ex.input[k].item<int64_t>() == toks[k]);
    });
    INFO("error: " << err);
    CHECK(err.empty() == valid);
    if (!err.empty()) CHECK(names_one_of(err, {file}));
    if (whole && out_of_range && n > 0) CHECK(err.find("is outside the vocabulary [0, 300)") != std::string::npos);
    loaded += err.empty();
  }
  CHECK(loaded >= 10);
}

namespace {

// PNG: a valid 4x4 file with its IHDR width/height replaced (and the chunk CRC recomputed, so that
// the size, not the checksum, is what the reader meets).
std::string png_with_size(const std::string& png, uint32_t w, uint32_t h) {
  std::string s = png;
  s.replace(16, 4, be32(w));
  s.replace(20, 4, be32(h));
  const uLong crc = ::crc32(0, reinterpret_cast<const Bytef*>(s.data() + 12), 17);  // "IHDR" + 13 bytes
  s.replace(29, 4, be32(static_cast<uint32_t>(crc)));
  return s;
}

// JPEG: the baseline frame header's height and width replaced (16-bit fields, no checksum).
std::string jpeg_with_size(const std::string& jpg, uint16_t w, uint16_t h) {
  std::string s = jpg;
  const size_t sof = s.find("\xff\xc0");
  REQUIRE(sof != std::string::npos);
  s[sof + 5] = char(h >> 8), s[sof + 6] = char(h & 255), s[sof + 7] = char(w >> 8), s[sof + 8] = char(w & 255);
  return s;
}

}  // namespace

TEST_CASE("fuzz: PNG and JPEG headers with random sizes decode or fail naming the file, never over the limit",
          "[unit]") {
  Rng rng(18008);
  auto dir = scratch_dir("fuzz_images");
  auto px = interleaved_image(0, 4, 4, 3);
  data::write_png((dir / "base.png").string(), px.data(), 4, 4, 3);
  data::write_jpeg((dir / "base.jpg").string(), px.data(), 4, 4, 3, 90);
  const std::string png = read_file(dir / "base.png"), jpg = read_file(dir / "base.jpg");
  std::vector<uint8_t> out, inter;
  for (int i = 0; i < 400; ++i) {
    const bool is_png = i % 2 == 0;
    // small sizes (decodable or a data mismatch) or sizes past the pixel limit; never a huge legal one
    auto side = [&](uint32_t max) -> uint32_t {
      return rng() % 2 ? rng() % 40 : std::min<uint64_t>(max, 11586 + rng() % (uint64_t{max} - 11585));
    };
    uint32_t w = side(is_png ? 0x7fffffffu : 65535), h = side(is_png ? 0x7fffffffu : 65535);
    if (w > 64 || h > 64) w = std::max<uint32_t>(w, 11586), h = std::max<uint32_t>(h, 11586);
    std::string bytes = is_png ? png_with_size(png, w, h) : jpeg_with_size(jpg, w, h);
    const bool corrupt = rng() % 4 == 0;  // and maybe one flipped byte after the size fields
    if (corrupt) bytes[40 + rng() % (bytes.size() - 40)] ^= static_cast<char>(1 + rng() % 255);
    const fs::path file = dir / (is_png ? "x.png" : "x.jpg");
    write_file(file, bytes);
    INFO("case " << i << ": " << (is_png ? "PNG " : "JPEG ") << w << "x" << h);
    std::string err;
    try {
      auto img = data::decode_image(file.string(), 3, 0, out, inter);
      CHECK(out.size() == size_t{3} * img.height * img.width);
      CHECK(uint64_t(img.height * img.width) <= data::kMaxImagePixels);
      if (!corrupt) CHECK((img.height == h && img.width == w));
    } catch (const DataError& e) {
      err = e.what();
    }
    INFO("error: " << err);
    // past the limit: our message, unless the library refused first (libpng's 1e6 width/height, libjpeg's 65500)
    if (!corrupt && uint64_t{w} * h > data::kMaxImagePixels) {
      CHECK(!err.empty());
      if (w <= 65500 && h <= 65500) CHECK(err.find("more than the limit of 134217728 pixels") != std::string::npos);
    }
    if (!corrupt && (w == 0 || h == 0)) CHECK(!err.empty());
    if (!err.empty()) CHECK(starts_with(err, file.string() + ": "));
  }
}

TEST_CASE("fuzz: JPEGs of every layout cut short or with flipped bytes decode or fail naming the file, whole and by "
          "region",
          "[unit]") {
  Rng rng(27027);
  auto dir = scratch_dir("fuzz_jpeg_kinds");
  const int64_t h = 37, w = 53;  // partial MCUs at both edges
  std::vector<std::string> bases;
  for (int k = 0; k < 6; ++k) {  // 4:2:0, 4:2:2, 4:4:4 progressive, grey, CMYK, YCCK progressive
    const int64_t c = k == 3 ? 1 : k >= 4 ? 4 : 3;
    std::vector<uint8_t> px(static_cast<size_t>(h * w * c));
    for (auto& b : px) b = static_cast<uint8_t>(rng());
    data::JpegLayout layout;
    layout.luma_h = k == 1 ? 2 : k == 2 ? 1 : 2;
    layout.luma_v = k == 1 || k == 2 ? 1 : 2;
    layout.progressive = k == 2 || k == 5;
    layout.ycck = k == 5;
    const auto f = dir / ("base" + std::to_string(k) + ".jpg");
    data::write_jpeg(f.string(), px.data(), h, w, c, layout);
    bases.push_back(read_file(f));
  }
  std::vector<uint8_t> out, inter;
  const fs::path file = dir / "x.jpg";
  for (int i = 0; i < 300; ++i) {
    std::string bytes = bases[static_cast<size_t>(i) % bases.size()];
    const bool cut = rng() % 2 == 0;
    if (cut) bytes.resize(2 + rng() % (bytes.size() - 2));
    const int flips = cut ? static_cast<int>(rng() % 2) : 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) bytes[2 + rng() % (bytes.size() - 2)] ^= static_cast<char>(1 + rng() % 255);
    write_file(file, bytes);
    const int64_t c = rng() % 3 == 0 ? 1 : 3;
    const int64_t top = static_cast<int64_t>(rng() % h), left = static_cast<int64_t>(rng() % w);
    const data::CropBox box{top, left, 1 + static_cast<int64_t>(rng()) % (h - top), 1 + static_cast<int64_t>(rng()) % (w - left)};
    const int64_t out_side = 1 + static_cast<int64_t>(rng() % 24);
    INFO("case " << i << ": base " << i % bases.size() << ", " << bytes.size() << " bytes, " << c << " channel(s)");
    for (bool region : {false, true}) {
      try {
        if (region) {
          const auto r = data::decode_image_region(file.string(), c, [&](int64_t hh, int64_t ww) {
            return data::CropBox{std::min(box.top, hh - 1), std::min(box.left, ww - 1), std::min(box.height, hh - std::min(box.top, hh - 1)),
                                 std::min(box.width, ww - std::min(box.left, ww - 1))};
          }, out_side, out_side, out, inter);
          CHECK(out.size() == static_cast<size_t>(c * r.height * r.width));
        } else {
          const auto img = data::decode_image(file.string(), c, 0, out, inter);
          CHECK(out.size() == static_cast<size_t>(c * img.height * img.width));
        }
      } catch (const DataError& e) {
        INFO("error: " << e.what());
        CHECK(starts_with(e.what(), file.string() + ": "));
      }
    }
  }
}
