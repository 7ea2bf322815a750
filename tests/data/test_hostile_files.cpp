// Hostile data files (issue 18, items 5, 6, 8a): header arithmetic that overflows, headers that claim
// huge images, gzip bombs, FIFOs and devices where a data file should be, token ids beyond the
// vocabulary. Each gives a DataError naming the file, before anything large is allocated, and never
// blocks (error_within turns a hang into a failure).
#include <catch2/catch.hpp>

#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "fixtures.hpp"
#include "hostile_util.hpp"
#include "skip.hpp"

using namespace trainer;
using namespace trainer::test;
using data::DataError;

namespace {


std::string hostile_open(const config::DataConfig& d, const config::ModelConfig& m) {
  return error_within(10, [&] { data::create_datasets(d, m, 0); }, d.path.c_str());
}

void write_idx_header(const fs::path& dir, uint32_t n, uint32_t h, uint32_t w, const std::string& data, bool gz) {
  const std::string ext = gz ? ".gz" : "";
  write_maybe_gz(dir / ("train-images-idx3-ubyte" + ext), be32(0x803) + be32(n) + be32(h) + be32(w) + data, gz);
  write_maybe_gz(dir / ("train-labels-idx1-ubyte" + ext), be32(0x801) + be32(n) + std::string(n % 64, '\0'), gz);
}

const char* kNotRegular = ", not a regular file (refusing to read it: it may block or never end)";

}  // namespace

TEST_CASE("hostile: IDX dims whose product overflows, or exceeds the file, fail naming the file", "[unit]") {
  for (bool gz : {false, true}) {
    auto dir = scratch_dir(gz ? "hostile_idx_gz" : "hostile_idx");
    const fs::path img = dir / (gz ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte");
    write_idx_header(dir, 0xffffffffu, 0xffffffffu, 0xffffffffu, std::string(64, '\1'), gz);
    CHECK(hostile_open(test::plain_data_cfg("idx", dir), resnet(1, 10)) ==
          img.string() + ": the IDX header dims 4294967295x4294967295x4294967295 overflow 64-bit arithmetic (corrupt header)");
    // 2^16 * 2^24 * 2^24 wraps to 0 in 64 bits: the old reader accepted it and crashed (SIGSEGV)
    write_idx_header(dir, 1u << 16, 1u << 24, 1u << 24, std::string(64, '\1'), gz);
    CHECK(hostile_open(test::plain_data_cfg("idx", dir), resnet(1, 10)) ==
          img.string() + ": the IDX header dims 65536x16777216x16777216 overflow 64-bit arithmetic (corrupt header)");
    write_idx_header(dir, 1u << 20, 1u << 20, 1u << 20, std::string(64, '\1'), gz);  // 2^60 bytes promised
    CHECK(hostile_open(test::plain_data_cfg("idx", dir), resnet(1, 10)) ==
          img.string() + ": truncated: 80 bytes of data, the header promises 1152921504606846992");
    write_idx_header(dir, 2, 0, 5, "", gz);
    CHECK(hostile_open(test::plain_data_cfg("idx", dir), resnet(1, 10)) ==
          img.string() + ": the IDX header gives an image side of 0 (2x0x5)");
  }
}

TEST_CASE("hostile: a gzip bomb stops at what the IDX header promises", "[unit]") {
  auto dir = scratch_dir("hostile_gzbomb");
  // 1 image of 2x2 promised, 64 MiB of zeros behind it (about 64 KiB compressed)
  write_idx_header(dir, 1, 2, 2, std::string(64u << 20, '\0'), true);
  CHECK(hostile_open(test::plain_data_cfg("idx", dir), resnet(1, 10)) ==
        (dir / "train-images-idx3-ubyte.gz").string() +
            ": the gzip data inflates to more than 20 bytes (the IDX header promises 20 bytes for 1x2x2)");
  // the raw file with trailing data is refused the same way
  write_idx_header(dir / "raw", 1, 2, 2, std::string(10, '\0'), false);
  CHECK(hostile_open(test::plain_data_cfg("idx", dir / "raw"), resnet(1, 10)) ==
        (dir / "raw" / "train-images-idx3-ubyte").string() +
            ": 26 bytes, more than 20 (the IDX header promises 20 bytes for 1x2x2)");
}

TEST_CASE("hostile: PNG and JPEG headers claiming huge images are refused before decoding, or skipped", "[unit]") {
  auto root = scratch_dir("hostile_huge_image");
  write_image_folder(root, {"a"}, 3, 8, 8, true);
  // a valid PNG whose IHDR (CRC recomputed) says 100000 x 100000
  std::string png = read_file(root / "a" / "img_0.png");
  png.replace(16, 8, be32(100000) + be32(100000));
  png.replace(29, 4, be32(static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17))));
  write_file(root / "a" / "img_1.png", png);
  std::vector<uint8_t> out, inter;
  CHECK(error_within(10, [&] { data::decode_image((root / "a" / "img_1.png").string(), 3, 0, out, inter); }) ==
        (root / "a" / "img_1.png").string() +
            ": the PNG header gives 100000x100000 pixels, more than the limit of 134217728 pixels (a corrupt header or "
            "a decompression bomb)");
  auto px = interleaved_image(0, 8, 8, 3);
  data::write_jpeg((root / "big.jpg").string(), px.data(), 8, 8, 3);
  std::string jpg = read_file(root / "big.jpg");
  const size_t sof = jpg.find("\xff\xc0");
  REQUIRE(sof != std::string::npos);
  jpg.replace(sof + 5, 4, std::string("\xea\x60\xea\x60", 4));  // 60000 x 60000
  write_file(root / "big.jpg", jpg);
  CHECK(error_within(10, [&] { data::probe_image((root / "big.jpg").string()); }) ==
        (root / "big.jpg").string() +
            ": the JPEG header gives 60000x60000 pixels, more than the limit of 134217728 pixels (a corrupt header or "
            "a decompression bomb)");

  // in an image folder: the worker's error names the file and sample; with on_bad_sample: skip it is skipped
  auto d = test::plain_data_cfg("image_folder", root);
  d.image_size = 8;
  auto ds = data::create_datasets(d, resnet(3, 1), 0).train;
  std::string err = error_within(10, [&] { ds->get(1, 0, false); });
  CHECK(starts_with(err, (root / "a" / "img_1.png").string() + ": the PNG header gives 100000x100000 pixels"));
  CHECK(err.find("(sample 1)") != std::string::npos);
  d.on_bad_sample = "skip";
  d.image_size = 0;  // the output size is probed from the first image: make that the bad one
  fs::rename(root / "a" / "img_1.png", root / "a" / "aaa.png");  // sorts first
  auto skipping = data::create_datasets(d, resnet(3, 1), 0).train;
  CHECK(skipping->sample_shape() == std::vector<int64_t>{3, 8, 8});
  data::LoaderOptions o;
  o.batch_size = 3;
  o.train = false;
  data::DataLoader l(skipping, o);
  auto b = l.next();
  REQUIRE(b);
  CHECK(b->target.size(0) == 2);
  CHECK(skipping->skipped() >= 1);
}

TEST_CASE("hostile: FIFOs and devices as data files fail at once naming the file", "[unit]") {
  auto dir = scratch_dir("hostile_fifo_data");
  if (!make_fifo(dir / "fifo.bin")) {
    TRAINER_SKIP("cannot create a FIFO here");
  }
  const std::string fifo = (dir / "fifo.bin").string();
  CHECK(hostile_open(test::plain_data_cfg("tokens", fifo), gpt(4, 256)) == fifo + ": is a FIFO (named pipe)" + kNotRegular);
  CHECK(hostile_open(test::plain_data_cfg("text", fifo), gpt(4, 256)) == fifo + ": is a FIFO (named pipe)" + kNotRegular);
  CHECK(hostile_open(test::plain_data_cfg("cifar", fifo), resnet(3, 10)) == fifo + ": is a FIFO (named pipe)" + kNotRegular);
  CHECK(hostile_open(test::plain_data_cfg("tokens", "/dev/zero"), gpt(4, 256)) ==
        std::string("/dev/zero: is a character device") + kNotRegular);
  CHECK(hostile_open(test::plain_data_cfg("text", "/dev/zero"), gpt(4, 256)) ==
        std::string("/dev/zero: is a character device") + kNotRegular);
  // an idx folder whose images file is a FIFO, then a link to /dev/zero
  write_idx(dir / "idx", "train", {1, 2}, 2, 2, false);
  const fs::path images = dir / "idx" / "train-images-idx3-ubyte";
  REQUIRE(make_fifo(images));
  CHECK(hostile_open(test::plain_data_cfg("idx", dir / "idx"), resnet(1, 10)) ==
        images.string() + ": is a FIFO (named pipe)" + kNotRegular);
  fs::remove(images);
  fs::create_symlink("/dev/zero", images);
  CHECK(hostile_open(test::plain_data_cfg("idx", dir / "idx"), resnet(1, 10)) ==
        images.string() + ": is a character device" + kNotRegular);
  // a token glob that matches a FIFO among real shards
  std::vector<uint16_t> toks(50, 3);
  write_nanogpt(dir / "tok" / "train_0.bin", toks);
  REQUIRE(make_fifo(dir / "tok" / "train_1.bin"));
  CHECK(hostile_open(test::plain_data_cfg("tokens", dir / "tok"), gpt(4, 256)) ==
        (dir / "tok" / "train_1.bin").string() + ": is a FIFO (named pipe)" + kNotRegular);
}

TEST_CASE("hostile: token ids beyond the vocabulary fail when the data is opened, with file and offset", "[unit]") {
  auto dir = scratch_dir("hostile_tokens");
  std::vector<uint16_t> toks(5000, 7);
  toks[4321] = 50257;  // GPT-2's vocabulary is [0, 50257)
  data::write_llmc_shard((dir / "train_000.bin").string(), toks.data(), toks.size());
  CHECK(hostile_open(test::plain_data_cfg("tokens", dir / "train_000.bin"), gpt(8, 50257)) ==
        (dir / "train_000.bin").string() +
            ": token 50257 at byte offset 9666 (token 4321 of the file) is outside the vocabulary [0, 50257) "
            "(model.vocab_size)");
  CHECK(hostile_open(test::plain_data_cfg("tokens", dir / "train_000.bin"), gpt(8, 50258)).empty());
  // the validation files are checked too
  toks[4321] = 7;
  data::write_llmc_shard((dir / "train_000.bin").string(), toks.data(), toks.size());
  toks[0] = 65535;
  write_nanogpt(dir / "val_000.bin", toks);
  CHECK(hostile_open(test::plain_data_cfg("tokens", dir), gpt(8, 50257)) ==
        (dir / "val_000.bin").string() +
            ": token 65535 at byte offset 0 (token 0 of the file) is outside the vocabulary [0, 50257) "
            "(model.vocab_size)");
}
