// Every kind of bad input gives a DataError naming the path and what is wrong.
#include <catch2/catch.hpp>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <sstream>

#include "data/file_util.hpp"
#include "data/loader.hpp"
#include "fixtures.hpp"

using namespace trainer;
using namespace trainer::test;
using data::create_datasets;
using data::DataError;

namespace {

config::DataConfig cfg(const std::string& format, const fs::path& path) {
  config::DataConfig d;
  d.format = config::parse_enum<config::DataFormat>(format, "data.format");
  d.path = path.string();
  d.normalize.mode = config::NormalizeMode::None;
  return d;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

std::string error_of(const config::DataConfig& d, const config::ModelConfig& m) {
  return error_of([&] { create_datasets(d, m, 0); });
}

// Loads every batch of `ds` through a 2-worker loader (decoding happens there).
void load_all(const std::shared_ptr<data::Dataset>& ds) {
  data::LoaderOptions o;
  o.batch_size = 2;
  o.train = false;
  data::DataLoader l(ds, o);
  while (l.next()) {
  }
}

}  // namespace

TEST_CASE("bad input: missing files and folders", "[unit]") {
  auto dir = scratch_dir("bad_missing");
  CHECK(error_of(cfg("idx", dir / "nope"), resnet(1, 10)) ==
        (dir / "nope").string() + ": no such file or folder (data.format idx)");
  CHECK(error_of(cfg("idx", dir), resnet(1, 10)) ==
        dir.string() + ": missing train-images-idx3-ubyte[.gz] (an idx folder holds train-images-idx3-ubyte and "
                       "train-labels-idx1-ubyte, gzip'd or not)");
  CHECK(error_of(cfg("cifar", dir / "x"), resnet(3, 10)) ==
        (dir / "x").string() + ": no such file or folder (data.format cifar)");
  CHECK(error_of(cfg("image_folder", dir / "imgs"), resnet(3, 2)) ==
        (dir / "imgs").string() + ": no such folder (data.format image_folder)");
  CHECK(error_of(cfg("text", dir / "t.txt"), gpt(8, 256)) ==
        (dir / "t.txt").string() + ": no such file, or no files match (data.format text)");
  CHECK(error_of(cfg("tokens", dir / "*.bin"), gpt(8, 256)) ==
        (dir / "*.bin").string() + ": no such file, or no files match (data.format tokens)");
}

TEST_CASE("bad input: wrong magic numbers", "[unit]") {
  auto dir = scratch_dir("bad_magic");
  write_idx(dir, "train", {1, 2}, 2, 2, false);
  write_file(dir / "train-labels-idx1-ubyte", be32(0x803) + be32(2) + std::string(2, '\0'));
  CHECK(error_of(cfg("idx", dir), resnet(1, 10)) ==
        (dir / "train-labels-idx1-ubyte").string() +
            ": wrong magic number 0x00000803, expected 0x00000801 (IDX unsigned-byte, 1 dims)");
  std::string header(1024, '\0');
  uint32_t magic = 20240801, version = 1, count = 4;
  std::memcpy(header.data(), &magic, 4);
  std::memcpy(header.data() + 4, &version, 4);
  std::memcpy(header.data() + 8, &count, 4);
  write_file(dir / "llama.bin", header + std::string(16, '\0'));
  CHECK(error_of(cfg("tokens", dir / "llama.bin"), gpt(2, 256)) ==
        (dir / "llama.bin").string() +
            ": wrong magic number 20240801 (llm.c uint32-token shard); expected 20240520 (llm.c uint16) or a "
            "headerless uint16 file");
  // llm.c's header with only its magic damaged: refused (its 1024 header bytes trained as 512 tokens)
  magic = 12345;
  std::memcpy(header.data(), &magic, 4);
  write_file(dir / "damaged.bin", header + std::string(8, '\0'));
  CHECK(error_of(cfg("tokens", dir / "damaged.bin"), gpt(2, 50304)) ==
        (dir / "damaged.bin").string() +
            ": an llm.c shard header (version 1, 4 tokens) with the magic number 12345, not 20240520: a damaged "
            "shard (write it again), not a headerless uint16 file");
  write_file(dir / "img" / "a" / "x.png", "this is not a PNG file");
  CHECK(error_of([&] { load_all(create_datasets(cfg("image_folder", dir / "img"), resnet(3, 1), 0).train); }).find(
            (dir / "img" / "a" / "x.png").string() + ": not a JPEG or PNG file") == 0);
}

TEST_CASE("bad input: truncated files", "[unit]") {
  auto dir = scratch_dir("bad_truncated");
  write_idx(dir, "train", {1, 2, 3}, 4, 4, false);
  auto img = read_file(dir / "train-images-idx3-ubyte");
  write_file(dir / "train-images-idx3-ubyte", img.substr(0, img.size() - 5));
  CHECK(error_of(cfg("idx", dir), resnet(1, 10)) ==
        (dir / "train-images-idx3-ubyte").string() + ": truncated: 59 bytes of data, the header promises 64");
  // a gzip stream cut short
  auto gzdir = scratch_dir("bad_truncated_gz");
  write_idx(gzdir, "train", std::vector<int>(200, 1), 16, 16, true);
  auto gz = read_file(gzdir / "train-images-idx3-ubyte.gz");
  write_file(gzdir / "train-images-idx3-ubyte.gz", gz.substr(0, gz.size() / 2));
  CHECK(error_of(cfg("idx", gzdir), resnet(1, 10)).find((gzdir / "train-images-idx3-ubyte.gz").string() +
                                                        ": corrupt or truncated gzip data") == 0);
  write_cifar(dir / "data_batch_1.bin", {1, 2}, false);
  auto c = read_file(dir / "data_batch_1.bin");
  write_file(dir / "data_batch_1.bin", c.substr(0, c.size() - 1));
  CHECK(error_of(cfg("cifar", dir), resnet(3, 10)) ==
        (dir / "data_batch_1.bin").string() +
            ": 6145 bytes is not a whole number of 3073-byte CIFAR-10 records (truncated or not a CIFAR binary file)");
  std::vector<uint16_t> toks(100, 7);
  data::write_llmc_shard((dir / "s.bin").string(), toks.data(), 100);
  auto s = read_file(dir / "s.bin");
  write_file(dir / "s.bin", s.substr(0, s.size() - 10));
  CHECK(error_of(cfg("tokens", dir / "s.bin"), gpt(4, 256)) ==
        (dir / "s.bin").string() +
            ": truncated or corrupt llm.c shard: the header says 100 tokens (1224 bytes), the file has 1214 bytes");
}

TEST_CASE("bad input: labels out of range fail, or are skipped and counted", "[unit]") {
  auto dir = scratch_dir("bad_label");
  write_idx(dir, "train", {1, 12, 3, 200}, 2, 2, false);
  CHECK(error_of(cfg("idx", dir), resnet(1, 10)) ==
        (dir / "train-labels-idx1-ubyte").string() + ": sample 1 has label 12, outside [0, 10) (model.num_classes = 10)");
  auto skip = cfg("idx", dir);
  skip.on_bad_sample = "skip";
  auto pair = create_datasets(skip, resnet(1, 10), 0);
  CHECK(pair.train->size() == 2);
  CHECK(pair.train->skipped() == 2);
  CHECK(pair.train->get(1, 0, false).target.item<int64_t>() == 3);
}

TEST_CASE("bad input: an undecodable image fails in the worker naming it, or is skipped", "[unit]") {
  auto root = scratch_dir("bad_image");
  write_image_folder(root, {"a", "b"}, 3, 8, 8, true);
  auto png = read_file(root / "b" / "img_1.png");
  write_file(root / "b" / "img_1.png", png.substr(0, 60));  // header intact, pixel data cut
  auto d = cfg("image_folder", root);
  auto pair = create_datasets(d, resnet(3, 2), 0);
  std::string err = error_of([&] { load_all(pair.train); });
  CHECK(err.find((root / "b" / "img_1.png").string() + ": cannot decode PNG") == 0);
  CHECK(err.find("(sample 4)") != std::string::npos);
  d.on_bad_sample = "skip";
  auto skipping = create_datasets(d, resnet(3, 2), 0).train;
  data::LoaderOptions o;
  o.batch_size = 6;
  o.train = false;
  data::DataLoader l(skipping, o);
  auto b = l.next();
  CHECK(b->target.size(0) == 5);
  CHECK(skipping->skipped() == 1);
}

// A batch whose every sample is bad (skip) takes the first good sample after it in the epoch's order:
// it threw, and a run whose final evaluation met one exited 1 without its final checkpoint.
TEST_CASE("bad input: a batch of bad samples only takes the next good one, the same in every worker layout", "[unit]") {
  auto root = scratch_dir("bad_batch");
  write_image_folder(root, {"a", "b"}, 4, 8, 8, true);
  for (const char* f : {"a/img_0.png", "a/img_1.png", "b/img_3.png"}) write_file(root / f, "");
  auto d = cfg("image_folder", root);
  d.on_bad_sample = "skip";
  d.image_size = 8;  // (not read from the first image, which is bad)
  auto ds = create_datasets(d, resnet(3, 2), 0).train;
  auto pass = [&](bool train, int workers) {
    data::LoaderOptions o;
    o.batch_size = 2;
    o.train = train;
    o.workers = workers;
    data::DataLoader l(ds, o);
    std::vector<data::Batch> out;
    for (int i = 0; i < 4; ++i) {
      auto b = l.next();
      if (!b) break;
      out.push_back(*b);
    }
    return out;
  };
  const auto eval = pass(false, 0);
  REQUIRE(eval.size() == 4);
  CHECK(eval[0].target.size(0) == 1);  // positions 0 and 1 bad: position 2 (a/img_2) stands in
  CHECK(torch::equal(eval[0].input[0], eval[1].input[0]));
  CHECK(eval[1].target.size(0) == 2);
  CHECK(eval[3].target.size(0) == 1);  // b/img_3 bad: the batch is shorter
  const auto two_workers = pass(false, 2);
  for (size_t i = 0; i < eval.size(); ++i) CHECK(torch::equal(eval[i].input, two_workers[i].input));
  // a shuffled epoch goes through too, every batch with a row, the same with 0 and 2 workers
  const auto train0 = pass(true, 0), train2 = pass(true, 2);
  REQUIRE(train0.size() == 4);
  REQUIRE(train2.size() == 4);
  for (size_t i = 0; i < train0.size(); ++i) {
    CHECK(train0[i].target.size(0) >= 1);
    CHECK(torch::equal(train0[i].input, train2[i].input));
  }
  // every sample bad: an error that says so
  for (const char* f : {"a/img_2.png", "a/img_3.png", "b/img_0.png", "b/img_1.png", "b/img_2.png"}) write_file(root / f, "");
  auto bad = create_datasets(d, resnet(3, 2), 0).train;
  data::LoaderOptions o;
  o.batch_size = 2;
  o.train = false;
  data::DataLoader l(bad, o);
  const std::string err = error_of([&] { l.next(); });
  CHECK(err.find(": every sample of a batch was bad and skipped (epoch 0, positions 0..1), and the 8 after it too: the "
                 "data is bad, not a few files") != std::string::npos);
}

TEST_CASE("bad input: image types torchvision reads and trainer does not are refused, or left out with skip", "[unit]") {
  auto root = scratch_dir("bad_other_types");
  write_image_folder(root, {"a", "b"}, 2, 8, 8, false);
  write_file(root / "a" / "notes.txt", "not an image: ignored, as torchvision ignores it");
  write_file(root / "b" / "x.BMP", "BM");
  write_file(root / "b" / "deeper" / "y.webp", "RIFF");
  write_file(root / "a" / "z.tif", "II*");
  auto d = cfg("image_folder", root);
  CHECK(error_of(d, resnet(3, 2)) ==
        root.string() + ": 3 image file(s) that torchvision's ImageFolder reads but trainer does not decode (JPEG and "
                        "PNG only): 1 .bmp, 1 .tif, 1 .webp; the first: " + (root / "a" / "z.tif").string() +
            ". Convert them to JPEG or PNG, or set data.on_bad_sample: skip to leave them out");
  d.on_bad_sample = "skip";
  auto pair = create_datasets(d, resnet(3, 2), 0);
  CHECK(pair.train->size() == 4);  // the JPEGs alone
  fs::remove_all(root / "a");
  fs::create_directories(root / "a");
  write_file(root / "a" / "only.ppm", "P6");  // a class of other types alone: no images left
  CHECK(error_of(d, resnet(3, 2)) == root.string() + ": class folder 'a' has no .jpg/.jpeg/.png images");
}

// As torchvision's ImageFolder (os.walk, followlinks=True): images in a linked folder count; a link
// back to a folder already listed is listed once, not walked forever; a link named like an image that
// leads nowhere is a bad sample (torchvision's loader fails on it), one named otherwise is ignored.
TEST_CASE("bad input: linked folders are followed once, links to nothing named like images are bad samples",
          "[unit]") {
  auto root = scratch_dir("bad_links");
  write_image_folder(root / "imgs", {"a", "b"}, 2, 8, 8, false);
  write_image_folder(root / "elsewhere", {"more"}, 3, 8, 8, false);
  const auto a = root / "imgs" / "a";
  fs::create_directory_symlink(root / "elsewhere" / "more", a / "more");
  fs::create_directory_symlink(a, a / "self");  // the class folder itself, again
  fs::create_symlink("loop", a / "loop");  // a loop of links, named like no image: ignored
  auto d = cfg("image_folder", root / "imgs");
  auto pair = create_datasets(d, resnet(3, 2), 0);
  CHECK(pair.train->size() == 2 + 3 + 2);  // a, more (through the link), b
  fs::create_symlink(root / "nothing.jpg", root / "imgs" / "b" / "gone.jpg");
  CHECK(error_of(d, resnet(3, 2)) ==
        (root / "imgs").string() + ": class folder 'b': 1 image file(s) or folder(s) that cannot be read; the first: " +
            (root / "imgs" / "b" / "gone.jpg").string() + ": a symbolic link to " + (root / "nothing.jpg").string() +
            ": No such file or directory. Remove or repair them, or set data.on_bad_sample: skip to leave them out");
  fs::create_symlink("twin.png", a / "twin.png");  // a loop of links, named like an image
  d.on_bad_sample = "skip";
  pair = create_datasets(d, resnet(3, 2), 0);
  CHECK(pair.train->size() == 7);  // both left out, with a warning each
  d.on_bad_sample = "error";
  fs::remove(root / "imgs" / "b" / "gone.jpg");
  CHECK(error_of(d, resnet(3, 2)) ==
        (root / "imgs").string() + ": class folder 'a': 1 image file(s) or folder(s) that cannot be read; the first: " +
            (a / "twin.png").string() + ": a symbolic link to twin.png: Too many levels of symbolic links. Remove or "
            "repair them, or set data.on_bad_sample: skip to leave them out");
  // beside the class folders: a link to nothing is no class; a loop of links is a bad sample (it was a
  // raw filesystem error whatever data.on_bad_sample said)
  fs::remove(a / "twin.png");
  fs::create_symlink(root / "nothing", root / "imgs" / "gone");
  CHECK(create_datasets(d, resnet(3, 2), 0).train->size() == 7);
  fs::create_symlink("selfloop", root / "imgs" / "selfloop");
  CHECK(error_of(d, resnet(3, 2)) ==
        (root / "imgs").string() + ": 'selfloop' beside the class folders cannot be read (Too many levels of symbolic "
        "links). Remove or repair it, or set data.on_bad_sample: skip to leave it out");
  d.on_bad_sample = "skip";
  CHECK(create_datasets(d, resnet(3, 2), 0).train->size() == 7);
}

TEST_CASE("bad input: a FIFO or a link to a device named like an image in a class folder is a bad sample, named",
          "[unit]") {
  auto root = scratch_dir("bad_special_files");
  write_image_folder(root / "imgs", {"a", "b"}, 2, 8, 8, false);
  REQUIRE(::mkfifo((root / "imgs" / "a" / "pipe.jpg").c_str(), 0600) == 0);
  auto d = cfg("image_folder", root / "imgs");
  CHECK(error_of(d, resnet(3, 2)) ==
        (root / "imgs").string() + ": class folder 'a': 1 image file(s) or folder(s) that cannot be read; the first: " +
            (root / "imgs" / "a" / "pipe.jpg").string() + ": a FIFO (named pipe), not a regular file. Remove or "
            "repair them, or set data.on_bad_sample: skip to leave them out");
  fs::remove(root / "imgs" / "a" / "pipe.jpg");
  fs::create_symlink("/dev/zero", root / "imgs" / "b" / "zero.png");
  CHECK(error_of(d, resnet(3, 2)) ==
        (root / "imgs").string() + ": class folder 'b': 1 image file(s) or folder(s) that cannot be read; the first: " +
            (root / "imgs" / "b" / "zero.png").string() + ": a symbolic link to a device, not a regular file. Remove "
            "or repair them, or set data.on_bad_sample: skip to leave them out");
  d.on_bad_sample = "skip";
  CHECK(create_datasets(d, resnet(3, 2), 0).train->size() == 4);  // left out, with a warning
  fs::create_symlink("/dev/null", root / "imgs" / "b" / "notes");   // not named like an image: ignored
  d.on_bad_sample = "error";
  fs::remove(root / "imgs" / "b" / "zero.png");
  CHECK(create_datasets(d, resnet(3, 2), 0).train->size() == 4);
  // a file named ".jpg" ends with the extension: an image, as torchvision's ImageFolder counts it
  fs::copy_file(root / "imgs" / "b" / "img_0.jpg", root / "imgs" / "b" / ".jpg");
  CHECK(create_datasets(d, resnet(3, 2), 0).train->size() == 5);
}

TEST_CASE("bad input: empty datasets", "[unit]") {
  auto dir = scratch_dir("bad_empty");
  fs::create_directories(dir / "imgs");
  CHECK(error_of(cfg("image_folder", dir / "imgs"), resnet(3, 2)) ==
        (dir / "imgs").string() + ": the dataset is empty (no class sub-folders)");
  fs::create_directories(dir / "imgs" / "cls");
  CHECK(error_of(cfg("image_folder", dir / "imgs"), resnet(3, 1)) ==
        (dir / "imgs").string() + ": class folder 'cls' has no .jpg/.jpeg/.png images");
  write_file(dir / "t.txt", "short");
  CHECK(error_of(cfg("text", dir / "t.txt"), gpt(8, 256)) ==
        (dir / "t.txt").string() + ": too short for one sample: 5 tokens, and no file segment has block_size + 1 = 9");
  write_idx(dir, "train", {}, 2, 2, false);
  CHECK(error_of(cfg("idx", dir), resnet(1, 10)) ==
        (dir / "train-images-idx3-ubyte").string() + ": the dataset is empty (no usable samples)");
}

TEST_CASE("bad input: class folders that differ between train and val", "[unit]") {
  auto root = scratch_dir("bad_classes");
  write_image_folder(root / "train", {"cat", "dog", "eel"}, 1, 4, 4, true);
  write_image_folder(root / "val", {"cat", "dog", "fox"}, 1, 4, 4, true);
  auto d = cfg("image_folder", root / "train");
  d.val_path = (root / "val").string();
  CHECK(error_of(d, resnet(3, 3)) == "class folders differ between " + (root / "train").string() + " and " +
                                         (root / "val").string() + ": only in train: eel; only in val: fox");
}

TEST_CASE("bad input: images of another size than a vit's model.image_size", "[unit]") {
  auto dir = scratch_dir("bad_vit_size");
  write_idx(dir, "train", {1, 2, 3}, 6, 6, false);
  config::ModelConfig vit = resnet(1, 10);
  vit.arch = "vit";
  vit.image_size = 4;
  vit.patch_size = 2;
  CHECK(error_of(cfg("idx", dir), vit) ==
        dir.string() + ": the images are 6x6 but model.arch vit takes model.image_size 4x4 (set data.image_size to resize)");
  auto resized = cfg("idx", dir);
  resized.image_size = 4;
  CHECK(data::create_datasets(resized, vit, 0).train->sample_shape() == std::vector<int64_t>{1, 4, 4});
  write_file(dir / "t.txt", std::string(100, 'x'));
  CHECK(error_of(cfg("text", dir / "t.txt"), vit) ==
        (dir / "t.txt").string() + ": data.format text gives tokens but model.arch vit takes images");
}

TEST_CASE("bad input: images smaller than a convnet takes", "[unit]") {
  auto dir = scratch_dir("bad_convnet_size");
  write_idx(dir, "train", {1, 2, 3}, 9, 9, false);
  config::ModelConfig convnet = resnet(1, 10);
  convnet.arch = "convnet";
  CHECK(data::create_datasets(cfg("idx", dir), convnet, 0).train->sample_shape() == std::vector<int64_t>{1, 9, 9});
  convnet.whiten = 3;  // 8 pixels for the pools, 2 for the unpadded 3x3 whitening conv
  CHECK(error_of(cfg("idx", dir), convnet) == dir.string() + ": the images are 9x9 but model.arch convnet takes images of "
                                                             "at least 10x10 with these model settings (set data.image_size "
                                                             "to resize)");
}

TEST_CASE("bad input: data that does not fit the model", "[unit]") {
  auto dir = scratch_dir("bad_model");
  write_idx(dir, "train", {1, 2}, 2, 2, false);
  CHECK(error_of(cfg("idx", dir), resnet(3, 10)) ==
        dir.string() + ": the images have 1 channel(s) but model.in_channels is 3");
  write_cifar(dir / "train.bin", {1, 2}, true);
  CHECK(error_of(cfg("cifar", dir / "train.bin"), resnet(3, 10)) ==
        (dir / "train.bin").string() + ": the data has 100 classes but model.num_classes is 10");
  write_file(dir / "t.txt", std::string(100, 'x'));
  CHECK(error_of(cfg("text", dir / "t.txt"), gpt(8, 100)) ==
        (dir / "t.txt").string() + ": the data has a vocabulary of 256 tokens but model.vocab_size is 100");
  CHECK(error_of(cfg("idx", dir), gpt(8, 256)) ==
        dir.string() + ": data.format idx gives images but model.arch gpt takes tokens");
  CHECK(error_of(cfg("text", dir / "t.txt"), resnet(1, 10)) ==
        (dir / "t.txt").string() + ": data.format text gives tokens but model.arch resnet takes images");
  // a token beyond the vocabulary is found when the data is opened, with its byte offset
  std::vector<uint16_t> toks(20, 5);
  toks[13] = 999;
  write_nanogpt(dir / "tok.bin", toks);
  auto tok = cfg("tokens", dir / "tok.bin");
  tok.val_fraction = 0;
  CHECK(error_of(tok, gpt(4, 512)) ==
        (dir / "tok.bin").string() +
            ": token 999 at byte offset 26 (token 13 of the file) is outside the vocabulary [0, 512) (model.vocab_size)");
}

// data.path "file, folder or glob" (CONFIG.md): a text glob passed the check at start, then the run
// said "no such file". The matches are read in order, one after the other.
TEST_CASE("text: a glob reads its files in order, and one that matches nothing names the pattern", "[data]") {
  auto dir = scratch_dir("text_glob");
  fs::create_directories(dir / "txt");
  for (int i = 1; i <= 3; ++i) write_file(dir / "txt" / ("part" + std::to_string(i) + ".txt"), std::string(100 * i, 'a' + i));
  auto one = cfg("text", dir / "txt" / "part2.txt");
  auto glob_one = cfg("text", dir / "txt" / "part2.*");
  one.val_fraction = glob_one.val_fraction = 0;  // the whole file
  CHECK(create_datasets(glob_one, gpt(8), 0).train->size() == create_datasets(one, gpt(8), 0).train->size());
  auto all = cfg("text", dir / "txt" / "part*.txt");
  all.val_path = (dir / "txt" / "part2.txt").string();
  const auto pair = create_datasets(all, gpt(8), 0);
  int64_t windows = 0;  // each file's windows: none crosses from one file into the next
  for (int i = 1; i <= 3; ++i)
    windows += create_datasets(cfg("text", dir / "txt" / ("part" + std::to_string(i) + ".txt")), gpt(8), 0).train->size();
  CHECK(pair.train->size() >= windows);
  CHECK(pair.val->size() == create_datasets(one, gpt(8), 0).train->size());
  CHECK(error_of(cfg("text", dir / "txt" / "*.md"), gpt(8)).find("*.md: no such file, or no files match (data.format text)") !=
        std::string::npos);
}

TEST_CASE("bad input: data.limit_samples that leaves classes of an image folder without samples is warned about",
          "[unit]") {
  auto root = scratch_dir("limit_classes");
  write_image_folder(root / "imgs", {"ant", "bee", "cat"}, 4, 8, 8, false);
  auto d = cfg("image_folder", root / "imgs");
  auto capture = [&](int64_t limit) {
    std::ostringstream out;
    auto before = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)));
    d.limit_samples = limit;
    const auto size = create_datasets(d, resnet(3, 3), 0).train->size();
    spdlog::set_default_logger(before);
    CHECK(size == limit);
    return out.str();
  };
  CHECK_THAT(capture(4), Catch::Contains("data.limit_samples 4 keeps the first 4 images of image_folder " +
                                         (root / "imgs").string()));
  CHECK_THAT(capture(4), Catch::Contains("2 of its 3 classes get no training sample (bee, cat)"));
  CHECK_THAT(capture(5), Catch::Contains("1 of its 3 classes get no training sample (cat)"));
  CHECK(capture(9).find("limit_samples") == std::string::npos);  // every class has one
}

// Two links to one folder: its images once (torchvision's ImageFolder gives them once per link), said
// in a warning; a link to a folder above it (a loop) adds nothing and is not such a repeat.
TEST_CASE("bad input: a folder reached through two links is listed once, and the log says so", "[unit]") {
  auto root = scratch_dir("bad_link_twice");
  write_image_folder(root / "imgs", {"a", "b"}, 2, 8, 8, false);
  write_image_folder(root / "elsewhere", {"more"}, 3, 8, 8, false);
  const auto b = root / "imgs" / "b";
  fs::create_directory_symlink(root / "elsewhere" / "more", b / "x1");
  fs::create_directory_symlink(root / "elsewhere" / "more", b / "x2");
  fs::create_directory_symlink(b, b / "self");  // a loop
  const auto listing = data::list_folder_files(b.string());
  CHECK(listing.files.size() == 2 + 3);
  REQUIRE(listing.repeated.size() == 1);  // x1 or x2, whichever was reached second; not `self`
  CHECK((listing.repeated[0].first == (b / "x1").string() || listing.repeated[0].first == (b / "x2").string()));
  CHECK(listing.repeated[0].second != listing.repeated[0].first);
  std::ostringstream out;
  auto before = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out)));
  const auto size = create_datasets(cfg("image_folder", root / "imgs"), resnet(3, 2), 0).train->size();
  spdlog::set_default_logger(before);
  CHECK(size == 2 + 2 + 3);
  CHECK_THAT(out.str(), Catch::Contains("class folder 'b': 1 folder(s) reached again through links, their images "
                                        "counted once (torchvision's ImageFolder counts them once per link)"));
}
