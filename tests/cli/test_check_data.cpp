// `trainer check` reads every image header of an image_folder (every image with --decode-all), so a
// file the first epoch would refuse or skip is named before the run starts: an empty file, a header
// past the size limit, a size other than the first image's with data.image_size 0, a truncated file.
// A header behind more metadata than the first read holds is still found.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "data/fixtures.hpp"
#include "data/image_decode.hpp"
#include "test_util.hpp"

using namespace trainer;
using test::run_trainer;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(const fs::path& p) { return test::read_file(p); }

void write_bytes(const fs::path& p, const std::string& b) {
  std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}

// A good 16x16 JPEG with two 60 KB comment segments before its frame header (ahead of the 64 KiB a
// header read takes first).
std::string jpeg_behind_comments(const fs::path& scratch) {
  const auto px = test::interleaved_image(99, 16, 16, 3);
  data::write_jpeg(scratch.string(), px.data(), 16, 16, 3, 90);
  const std::string j = bytes_of(scratch);
  std::string com;
  for (int k = 0; k < 2; ++k) {
    const int len = 60000;  // the segment's length field counts itself
    com += "\xFF\xFE";
    com += static_cast<char>(len >> 8);
    com += static_cast<char>(len & 0xFF);
    com += std::string(len - 2, 'c');
  }
  return j.substr(0, 2) + com + j.substr(2);
}

// A JPEG whose frame header claims 60000x60000 pixels.
std::string jpeg_claiming_huge(const fs::path& scratch) {
  const auto px = test::interleaved_image(98, 16, 16, 3);
  data::write_jpeg(scratch.string(), px.data(), 16, 16, 3, 90);
  std::string j = bytes_of(scratch);
  const auto sof = j.find("\xFF\xC0");
  REQUIRE(sof != std::string::npos);
  for (size_t k : {sof + 5, sof + 7}) {  // height, then width, big-endian
    j[k] = static_cast<char>(60000 >> 8);
    j[k + 1] = static_cast<char>(60000 & 0xFF);
  }
  return j;
}

// A convnet on the image folder `root` (data.image_size `size`: 0 keeps the first image's); mean and
// std given, so the statistics pass (which decodes the first images) does not run first.
std::string folder_config(const fs::path& dir, const fs::path& root, int size) {
  test::write_file(dir / "exp.yaml",
                   "model: {arch: convnet, in_channels: 3, num_classes: 2}\n"
                   "data: {format: image_folder, path: " + root.string() + ", image_size: " + std::to_string(size) +
                       ", normalize: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}}\n"
                   "train: {batch_size: 2, max_steps: 1}\n");
  return (dir / "exp.yaml").string();
}

}  // namespace

TEST_CASE("check reads every image header and names the files a run would refuse or skip", "[e2e]") {
  auto dir = test::scratch_dir("check_data");
  const auto root = dir / "images";
  test::write_image_folder(root, {"a", "b"}, 3, 16, 16, /*png=*/false);
  write_bytes(root / "a/behind_comments.jpg", jpeg_behind_comments(dir / "tmp.jpg"));
  write_bytes(root / "a/empty.jpg", "");
  write_bytes(root / "b/huge.jpg", jpeg_claiming_huge(dir / "tmp.jpg"));
  const auto other = test::interleaved_image(97, 20, 16, 3);
  data::write_png((root / "b/taller.png").string(), other.data(), 20, 16, 3);
  const std::string cut = bytes_of(root / "b/img_1.jpg");
  const auto sos = cut.find("\xFF\xDA");  // cut in the middle of the image data: the header is whole
  REQUIRE(sos != std::string::npos);
  write_bytes(root / "b/truncated.jpg", cut.substr(0, sos + (cut.size() - sos) / 2));
  const std::string cfg = folder_config(dir, root, 0);

  auto r = run_trainer("check " + cfg);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("error: train data: 3 of 11 image headers read are bad:") != std::string::npos);
  CHECK(r.output.find(root.string() + "/a/empty.jpg: an empty file (0 bytes), not an image") != std::string::npos);
  CHECK(r.output.find(root.string() + "/b/huge.jpg: the JPEG header gives 60000x60000 pixels, more than the limit") !=
        std::string::npos);
  CHECK(r.output.find(root.string() + "/b/taller.png: image is 20x16, the others 16x16 (set data.image_size to "
                      "resize)") != std::string::npos);
  CHECK(r.output.find("behind_comments") == std::string::npos);  // its header was found past the first read
  CHECK(r.output.find("truncated") == std::string::npos);        // a header read cannot tell
  CHECK(r.output.find("set data.on_bad_sample: skip to leave them out") != std::string::npos);

  // --decode-all finds the truncated one too; with skip a warning, and check passes
  auto all = run_trainer("check " + cfg + " --decode-all --set data.on_bad_sample=skip");
  INFO(all.output);
  CHECK(all.exit_code == 0);
  CHECK(all.output.find("warning: train data: 4 of 11 images decoded are bad:") != std::string::npos);
  CHECK(all.output.find(root.string() + "/b/truncated.jpg: ") != std::string::npos);
  CHECK(all.output.find("behind_comments") == std::string::npos);
  CHECK(all.output.find("(data.on_bad_sample: skip: a run leaves them out)") != std::string::npos);

  // the good ones alone: every header read, all good
  for (const char* f : {"a/empty.jpg", "b/huge.jpg", "b/taller.png", "b/truncated.jpg"}) fs::remove(root / f);
  auto good = run_trainer("check " + cfg);
  INFO(good.output);
  CHECK(good.exit_code == 0);
  CHECK(good.output.find("train data: 7 image headers read, all good") != std::string::npos);
}

// The headers are read several at once: the bad ones are still named in the folder's order, the
// first five and then a count; data.limit_samples reads only the samples the run uses.
TEST_CASE("check names bad files in folder order whatever thread read them, and only the samples data.limit_samples keeps",
          "[e2e]") {
  auto dir = test::scratch_dir("check_data_order");
  const auto root = dir / "images";
  test::write_image_folder(root, {"a", "b"}, 40, 8, 8, /*png=*/false);
  for (int k = 0; k < 7; ++k) write_bytes(root / "b" / ("zz_" + std::to_string(k) + ".jpg"), "");  // last in b
  write_bytes(root / "a" / "aa_empty.jpg", "");                                                   // first in a
  const std::string cfg = folder_config(dir, root, 8);

  auto r = run_trainer("check " + cfg);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("error: train data: 8 of 88 image headers read are bad:") != std::string::npos);
  std::string named;
  for (const char* f : {"a/aa_empty.jpg", "b/zz_0.jpg", "b/zz_1.jpg", "b/zz_2.jpg", "b/zz_3.jpg"})
    named += "\n  " + (root / f).string() + ": an empty file (0 bytes), not an image";
  CHECK(r.output.find(named + "\n  ... and 3 more") != std::string::npos);

  // the first 41 samples: class a's, its empty file among them (b's are not read)
  auto first = run_trainer("check " + cfg + " --set data.limit_samples=41");
  INFO(first.output);
  CHECK(first.exit_code == 1);
  CHECK(first.output.find("error: train data: 1 of 41 image headers read are bad:") != std::string::npos);
  fs::remove(root / "a" / "aa_empty.jpg");
  auto good = run_trainer("check " + cfg + " --set data.limit_samples=80");
  INFO(good.output);
  CHECK(good.exit_code == 0);
  CHECK(good.output.find("train data: 80 image headers read, all good") != std::string::npos);
  // with skip, a split whose every file is bad is still an error: a run would have nothing to read
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) write_bytes(e.path(), "");
  auto none = run_trainer("check " + cfg + " --set data.on_bad_sample=skip");
  INFO(none.output);
  CHECK(none.exit_code == 1);
  CHECK(none.output.find("error: train data: 87 of 87 image headers read are bad:") != std::string::npos);
  CHECK(none.output.find("(every one: with data.on_bad_sample: skip a run has nothing left to read)") != std::string::npos);
  // the image size taken from the first image that decodes (data.image_size 0): there is none. Said so; the
  // last file's error alone read as if skip had been ignored (found from outside)
  auto unsized = run_trainer("check " + cfg + " --set data.on_bad_sample=skip --set data.image_size=0");
  INFO(unsized.output);
  CHECK(unsized.exit_code == 1);
  CHECK(unsized.output.find(root.string() + ": none of its 87 image(s) could be decoded (data.on_bad_sample: skip "
                            "skips bad ones, but one is needed for the image size); the last: ") != std::string::npos);
}

// Under the default normalisation (mean_std, the statistics computed from the first images) the
// statistics pass stopped at the first bad file and check named that one alone.
TEST_CASE("check names every bad file when the normalisation statistics would stop at the first", "[e2e]") {
  auto dir = test::scratch_dir("check_data_stats");
  const auto root = dir / "images";
  test::write_image_folder(root, {"a", "b"}, 6, 8, 8, /*png=*/false);
  for (const char* f : {"a/img_1.jpg", "a/img_3.jpg", "b/img_2.jpg"}) write_bytes(root / f, "");
  test::write_file(dir / "exp.yaml", "model: {arch: convnet, in_channels: 3, num_classes: 2}\n"
                                     "data: {format: image_folder, path: " + root.string() + ", image_size: 8}\n"
                                     "train: {batch_size: 2, max_steps: 1}\n");
  auto r = run_trainer("check " + (dir / "exp.yaml").string());
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("error: train data: 3 of 12 image headers read are bad:") != std::string::npos);
  CHECK(r.output.find(root.string() + "/b/img_2.jpg: an empty file (0 bytes), not an image") != std::string::npos);
}
