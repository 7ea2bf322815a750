// Each reader on fixture files the tests write, and real Fashion-MNIST when the Debian package is
// installed.
#include <catch2/catch.hpp>

#include "data/dataset.hpp"
#include "data/image_dataset.hpp"
#include "data/loader.hpp"
#include "fixtures.hpp"
#include "skip.hpp"

using namespace trainer;
using namespace trainer::test;
using data::create_datasets;

namespace {

config::DataConfig data_cfg(const std::string& format, const fs::path& path) {
  config::DataConfig d;
  d.format = config::parse_enum<config::DataFormat>(format, "data.format");
  d.path = path.string();
  d.normalize.mode = config::NormalizeMode::None;  // inputs are pixel / 255: compared with the written bytes
  return d;
}

std::vector<int> cycle_labels(int n, int classes) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i % classes);
  return v;
}

// The expected (C, H, W) input of fixture image i, in [0, 1].
torch::Tensor expected_image(int64_t i, int64_t c, int64_t h, int64_t w) {
  auto t = torch::empty({c, h, w});
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) t[k][y][x] = pixel_value(i, k, y, x) / 255.0f;
  return t;
}

std::vector<int64_t> to_vec(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

TEST_CASE("idx: gzip'd train and raw t10k files give the written pixels and labels", "[unit]") {
  auto dir = scratch_dir("data_idx");
  write_idx(dir, "train", cycle_labels(20, 10), 5, 4, true);
  write_idx(dir, "t10k", {3, 1, 4, 1, 5, 9}, 5, 4, false);
  auto pair = create_datasets(data_cfg("idx", dir), resnet(1, 10), 0);
  REQUIRE(pair.train->size() == 20);
  REQUIRE(pair.val->size() == 6);
  CHECK(pair.train->sample_shape() == std::vector<int64_t>{1, 5, 4});
  auto ex = pair.train->get(13, 0, false);
  CHECK(ex.target.item<int64_t>() == 3);
  CHECK(torch::allclose(ex.input, expected_image(13, 1, 5, 4)));
  auto v = pair.val->get(5, 0, false);
  CHECK(v.target.item<int64_t>() == 9);
  CHECK(torch::allclose(v.input, expected_image(5, 1, 5, 4)));
  CHECK(pair.train->describe() == "idx " + (dir / "train-images-idx3-ubyte.gz").string() +
                                      ": 20 images 1x5x4, 10 classes");
}

TEST_CASE("idx: an explicit images file finds its labels file and has no implied validation", "[unit]") {
  auto dir = scratch_dir("data_idx_file");
  write_idx(dir, "train", cycle_labels(7, 10), 3, 3, false);
  auto pair = create_datasets(data_cfg("idx", dir / "train-images-idx3-ubyte"), resnet(1, 10), 0);
  CHECK(pair.train->size() == 7);
  CHECK(pair.val == nullptr);
}

TEST_CASE("idx: real Fashion-MNIST has 60000/10000 images of 1x28x28, 6000 per class, torchvision's statistics",
          "[unit]") {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(root)) {
    TRAINER_SKIP("dataset-fashion-mnist is not installed at " << root);
  }
  auto cfg = data_cfg("idx", root);
  auto pair = create_datasets(cfg, resnet(1, 10), 0);
  REQUIRE(pair.train->size() == 60000);
  REQUIRE(pair.val->size() == 10000);
  CHECK(pair.train->sample_shape() == std::vector<int64_t>{1, 28, 28});
  data::LoaderOptions o;
  o.batch_size = 5000;
  o.workers = 0;
  o.train = false;
  data::DataLoader loader(pair.train, o);
  auto counts = torch::zeros({10}, torch::kInt64);
  while (auto b = loader.next()) counts += torch::bincount(b->target, {}, 10);
  CHECK(to_vec(counts) == std::vector<int64_t>(10, 6000));
  // the per-channel statistics every Fashion-MNIST recipe uses: mean 0.2860, std 0.3530
  auto stats = dynamic_cast<data::ImageDataset&>(*pair.train).compute_stats(0);
  CHECK(stats.mean[0] == Approx(0.2860).margin(1e-4));
  CHECK(stats.std[0] == Approx(0.3530).margin(1e-4));
}

TEST_CASE("cifar: CIFAR-10 batches and CIFAR-100 fine labels", "[unit]") {
  auto dir10 = scratch_dir("data_cifar10");
  write_cifar(dir10 / "data_batch_1.bin", {0, 1, 2}, false);
  write_cifar(dir10 / "data_batch_2.bin", {7, 8}, false);
  write_cifar(dir10 / "test_batch.bin", {9}, false);
  auto p10 = create_datasets(data_cfg("cifar", dir10), resnet(3, 10), 0);
  REQUIRE(p10.train->size() == 5);
  REQUIRE(p10.val->size() == 1);
  auto ex = p10.train->get(3, 0, false);  // first record of data_batch_2
  CHECK(ex.target.item<int64_t>() == 7);
  CHECK(torch::allclose(ex.input, expected_image(0, 3, 32, 32)));
  CHECK(p10.val->get(0, 0, false).target.item<int64_t>() == 9);

  auto dir100 = scratch_dir("data_cifar100");
  write_cifar(dir100 / "train.bin", {42, 99, 3}, true);
  write_cifar(dir100 / "test.bin", {57}, true);
  auto p100 = create_datasets(data_cfg("cifar", dir100), resnet(3, 100), 0);
  CHECK(p100.train->num_classes() == 100);
  CHECK(p100.train->get(1, 0, false).target.item<int64_t>() == 99);
  CHECK(torch::allclose(p100.train->get(2, 0, false).input, expected_image(2, 3, 32, 32)));
  CHECK(p100.val->get(0, 0, false).target.item<int64_t>() == 57);
}

TEST_CASE("image_folder: PNG decodes exactly, classes are the sorted folder names", "[unit]") {
  auto root = scratch_dir("data_folder_png");
  write_image_folder(root / "train", {"dog", "cat"}, 3, 6, 8, true);
  write_image_folder(root / "val", {"dog", "cat"}, 1, 6, 8, true);
  auto cfg = data_cfg("image_folder", root / "train");
  cfg.val_path = (root / "val").string();
  auto pair = create_datasets(cfg, resnet(3, 2), 0);
  REQUIRE(pair.train->size() == 6);
  REQUIRE(pair.val->size() == 2);
  CHECK(pair.train->sample_shape() == std::vector<int64_t>{3, 6, 8});
  // write order: dog images are 0..2, cat images 3..5; sorted classes: cat = 0, dog = 1
  auto ex = pair.train->get(1, 0, false);  // cat/img_1.png = written image 4
  CHECK(ex.target.item<int64_t>() == 0);
  CHECK(torch::allclose(ex.input, expected_image(4, 3, 6, 8), 0, 1e-6));  // lossless: only float rounding
  CHECK(pair.train->get(4, 0, false).target.item<int64_t>() == 1);
}

TEST_CASE("image_folder: JPEG decodes close to the written pixels and resizes to data.image_size", "[unit]") {
  auto root = scratch_dir("data_folder_jpg");
  // a smooth image (JPEG's case): a gradient
  fs::create_directories(root / "a");
  std::vector<uint8_t> px(24 * 32 * 3);
  for (int y = 0; y < 24; ++y)
    for (int x = 0; x < 32; ++x)
      for (int c = 0; c < 3; ++c) px[(y * 32 + x) * 3 + c] = static_cast<uint8_t>(40 + 4 * x + 2 * y + 20 * c);
  data::write_jpeg((root / "a" / "g.jpg").string(), px.data(), 24, 32, 3, 95);
  auto cfg = data_cfg("image_folder", root);
  auto pair = create_datasets(cfg, resnet(3, 1), 0);
  auto img = pair.train->get(0, 0, false).input;  // (3, 24, 32)
  auto ref = torch::from_blob(px.data(), {24, 32, 3}, torch::kUInt8).permute({2, 0, 1}).to(torch::kFloat) / 255;
  CHECK((img - ref).abs().mean().item<double>() < 0.01);
  cfg.image_size = 12;  // shorter side 24 -> 12, long side 32 -> 16, centre crop 12 x 12
  auto small = create_datasets(cfg, resnet(3, 1), 0);
  CHECK(small.train->sample_shape() == std::vector<int64_t>{3, 12, 12});
  auto s = small.train->get(0, 0, false).input;
  // torch's own antialiased resize: at::_upsample_bilinear2d_aa directly (InterpolateFuncOptions'
  // temporary trips GCC 12's -Wmaybe-uninitialized false positive on its optional<vector> member)
  auto ref_small = at::_upsample_bilinear2d_aa(ref.unsqueeze(0), {12, 16}, /*align_corners=*/false)[0].narrow(2, 2, 12);
  CHECK((s - ref_small).abs().max().item<double>() < 0.03);
}

TEST_CASE("text: byte tokens, windows of block_size + 1 shifted by one, tail validation split", "[unit]") {
  auto dir = scratch_dir("data_text");
  std::string text;
  for (int i = 0; i < 100; ++i) text += char('a' + i % 26);
  write_file(dir / "t.txt", text);
  auto cfg = data_cfg("text", dir / "t.txt");
  cfg.val_fraction = 0.2;
  auto pair = create_datasets(cfg, gpt(8), 0);
  CHECK(pair.train->size() == 9);  // (80 - 1) / 8
  CHECK(pair.val->size() == 2);    // (20 - 1) / 8
  auto ex = pair.train->get(2, 0, false);
  CHECK(to_vec(ex.input) == std::vector<int64_t>(text.begin() + 16, text.begin() + 24));
  CHECK(to_vec(ex.target) == std::vector<int64_t>(text.begin() + 17, text.begin() + 25));
  CHECK(to_vec(pair.val->get(1, 0, false).input) == std::vector<int64_t>(text.begin() + 88, text.begin() + 96));
}

TEST_CASE("tokens: llm.c and nanoGPT shards from a glob, windows stay inside a shard", "[unit]") {
  auto dir = scratch_dir("data_tokens");
  std::vector<uint16_t> a(100), b(50);
  for (int i = 0; i < 100; ++i) a[i] = static_cast<uint16_t>(300 + i);
  for (int i = 0; i < 50; ++i) b[i] = static_cast<uint16_t>(1000 + i);
  data::write_llmc_shard((dir / "train_000000.bin").string(), a.data(), 100);
  write_nanogpt(dir / "train_000001.bin", b);
  auto cfg = data_cfg("tokens", dir / "train_*.bin");
  cfg.val_fraction = 0;
  auto pair = create_datasets(cfg, gpt(10, 2048), 0);
  REQUIRE(pair.train->size() == 9 + 4);  // (100 - 1) / 10 + (50 - 1) / 10
  CHECK(pair.val == nullptr);
  auto last_a = pair.train->get(8, 0, false);
  CHECK(to_vec(last_a.input).front() == 380);
  CHECK(to_vec(last_a.target).back() == 390);
  auto first_b = pair.train->get(9, 0, false);
  std::vector<int64_t> want(10);
  for (int i = 0; i < 10; ++i) want[i] = 1000 + i;
  CHECK(to_vec(first_b.input) == want);
  CHECK(to_vec(first_b.target).back() == 1010);
}

TEST_CASE("prepare-text writes llm.c shards that read back as the text's bytes", "[unit]") {
  auto dir = scratch_dir("data_prepare");
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char(32 + (i * 7) % 90);
  write_file(dir / "in.txt", text);
  REQUIRE(data::cmd_prepare_text((dir / "in.txt").string(), (dir / "out").string(), 300, 0.1) == 0);
  CHECK(fs::exists(dir / "out" / "train_000002.bin"));
  CHECK(!fs::exists(dir / "out" / "train_000003.bin"));
  CHECK(fs::file_size(dir / "out" / "train_000000.bin") == 1024 + 600);
  CHECK(fs::exists(dir / "out" / "val_000000.bin"));
  auto pair = create_datasets(data_cfg("tokens", dir / "out"), gpt(16), 0);
  CHECK(pair.train->size() == 3 * ((300 - 1) / 16));
  CHECK(pair.val->size() == (100 - 1) / 16);
  // sample 20 = shard 1, window 2: bytes 300 + 32 ...
  auto ex = pair.train->get(20, 0, false);
  CHECK(to_vec(ex.input) == std::vector<int64_t>(text.begin() + 332, text.begin() + 348));
  CHECK(to_vec(pair.val->get(0, 0, false).input) == std::vector<int64_t>(text.begin() + 900, text.begin() + 916));
}

TEST_CASE("synthetic: deterministic from the seed, learnable structure", "[unit]") {
  config::DataConfig d;
  d.format = config::DataFormat::Synthetic;
  d.synthetic.num_samples = 64;
  d.synthetic.image_size = 8;
  auto a = create_datasets(d, resnet(3, 4), 7), b = create_datasets(d, resnet(3, 4), 7),
       c = create_datasets(d, resnet(3, 4), 8);
  CHECK(a.train->size() == 64);
  CHECK(a.val->size() == 256);
  CHECK(torch::equal(a.train->get(5, 0, false).input, b.train->get(5, 0, false).input));
  CHECK(!torch::equal(a.train->get(5, 0, false).input, c.train->get(5, 0, false).input));
  auto t = create_datasets(d, gpt(12, 100), 3);
  auto ex = t.train->get(9, 0, false);
  CHECK(torch::equal(ex.input.narrow(0, 1, 11), ex.target.narrow(0, 0, 11)));
  CHECK(ex.input.max().item<int64_t>() < 100);
}

TEST_CASE("normalize: given mean/std, minmax and computed statistics", "[unit]") {
  auto dir = scratch_dir("data_norm");
  write_idx(dir, "train", cycle_labels(10, 10), 4, 4, false);
  auto cfg = data_cfg("idx", dir);
  cfg.normalize.mode = config::NormalizeMode::MeanStd;
  cfg.normalize.mean = {0.5};
  cfg.normalize.std = {0.25};
  auto pair = create_datasets(cfg, resnet(1, 10), 0);
  CHECK(torch::allclose(pair.train->get(3, 0, false).input, (expected_image(3, 1, 4, 4) - 0.5) / 0.25, 1e-5, 1e-5));
  cfg.normalize.mean.clear();
  cfg.normalize.std.clear();
  auto computed = create_datasets(cfg, resnet(1, 10), 0);
  std::vector<torch::Tensor> all;
  for (int i = 0; i < 10; ++i) all.push_back(computed.train->get(i, 0, false).input);
  auto x = torch::stack(all);
  CHECK(x.mean().item<double>() == Approx(0.0).margin(1e-5));
  CHECK(x.std(/*unbiased=*/false).item<double>() == Approx(1.0).epsilon(1e-4));
  cfg.normalize.mode = config::NormalizeMode::Minmax;
  auto mm = create_datasets(cfg, resnet(1, 10), 0);
  std::vector<torch::Tensor> m;
  for (int i = 0; i < 10; ++i) m.push_back(mm.train->get(i, 0, false).input);
  auto y = torch::stack(m);
  CHECK(y.min().item<double>() == Approx(0.0));
  CHECK(y.max().item<double>() == Approx(1.0));
}

TEST_CASE("image_folder: RandomResizedCrop cuts the whole decoded image, then resizes to data.image_size", "[unit]") {
  auto root = scratch_dir("data_folder_rrc");
  write_image_folder(root, {"a"}, 3, 20, 30, /*png=*/true);  // lossless: the decoded image is the written one
  auto cfg = data_cfg("image_folder", root);
  cfg.image_size = 8;
  cfg.augment.random_resized_crop = true;
  auto ds = create_datasets(cfg, resnet(3, 1), /*seed=*/4).train;
  REQUIRE(ds->sample_shape() == std::vector<int64_t>{3, 8, 8});
  for (int64_t index = 0; index < 3; ++index) {
    const int64_t epoch = 1;
    auto planar = torch::from_blob(interleaved_image(index, 20, 30, 3).data(), {20, 30, 3}, torch::kUInt8)
                      .permute({2, 0, 1})
                      .contiguous();  // (3, 20, 30), the full-size source
    auto rng = data::make_rng(data::RngStream::ResizedCrop, 4, epoch, index);
    const auto box = data::sample_resized_crop(20, 30, cfg.augment.rrc_scale, cfg.augment.rrc_ratio, rng);
    std::vector<uint8_t> want(3 * 8 * 8), tmp;
    std::vector<float> scratch;
    data::resized_crop(planar.data_ptr<uint8_t>(), 3, 20, 30, box, want.data(), 8, 8, tmp, scratch);
    auto got = ds->get(index, epoch, /*augment=*/true).input;  // normalize none: x / 255
    auto want_t = torch::from_blob(want.data(), {3, 8, 8}, torch::kUInt8).to(torch::kFloat) / 255;
    INFO("sample " << index << " box " << box.top << "," << box.left << " " << box.height << "x" << box.width);
    CHECK(torch::allclose(got, want_t, 0, 1e-6));
    // the evaluation view is the resize + centre crop, not a random crop
    CHECK_FALSE(torch::allclose(ds->get(index, epoch, false).input, want_t, 0, 1e-6));
  }
}

TEST_CASE("idx: data.augment.hflip_alternate shows each image mirrored in the next epoch", "[unit]") {
  auto dir = scratch_dir("data_idx_alt_flip");
  write_idx(dir, "train", cycle_labels(40, 10), 5, 4, false);
  auto cfg = data_cfg("idx", dir / "train-images-idx3-ubyte");
  cfg.augment.hflip = true;
  auto random_flips = create_datasets(cfg, resnet(1, 10), 0).train;
  cfg.augment.hflip_alternate = true;
  auto alternating = create_datasets(cfg, resnet(1, 10), 0).train;
  int random_repeats = 0, flipped = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const auto plain = alternating->get(i, 0, /*augment=*/false).input;
    REQUIRE(torch::allclose(plain, expected_image(i, 1, 5, 4)));
    const auto e0 = alternating->get(i, 0, true).input, e1 = alternating->get(i, 1, true).input;
    const auto e2 = alternating->get(i, 2, true).input;
    INFO("sample " << i);
    CHECK(torch::equal(e0, plain) != torch::equal(e0, plain.flip({2})));  // 4 columns, no symmetric image
    CHECK(torch::equal(e1, e0.flip({2})));
    CHECK(torch::equal(e2, e0));
    flipped += !torch::equal(e0, plain);
    random_repeats += torch::equal(random_flips->get(i, 0, true).input, random_flips->get(i, 1, true).input);
  }
  CHECK(flipped > 0);
  CHECK(flipped < 40);
  CHECK(random_repeats > 0);  // random flips repeat an image's orientation about half the time
}

// data.normalize mean_std without values computes them from the training split: a synthetic set took
// every sample (30 million: 24 s at start, deaf to a stop signal; 1e9 is allowed). It takes at most
// 2^28 bytes of samples spread over the set now, and a small set whole, as before.
TEST_CASE("synthetic images: the normalisation statistics of a huge set come from a part, a small set's from all",
          "[unit]") {
  config::DataConfig d;
  d.format = config::DataFormat::Synthetic;
  d.synthetic.image_size = 16;
  config::ModelConfig m;
  m.in_channels = 1;
  m.num_classes = 4;
  d.synthetic.num_samples = 1000000000;  // every sample: about 13 minutes on a 2-core host
  auto huge = create_datasets(d, m, 5).train;
  auto* hi = dynamic_cast<data::ImageDataset*>(huge.get());
  REQUIRE(hi != nullptr);
  CHECK(hi->stats_samples() == (int64_t{1} << 28) / 256);
  const auto& values = hi->normalizer().values();
  REQUIRE(values.a.size() == 1);
  // pixels are noise in [0, 128) plus 100 on a quarter of the rows: mean (63.5 + 25) / 255
  CHECK(values.a[0] == Approx(88.5 / 255).epsilon(0.01));
  d.synthetic.num_samples = 300;
  auto small = create_datasets(d, m, 5).train;
  auto* si = dynamic_cast<data::ImageDataset*>(small.get());
  REQUIRE(si != nullptr);
  const auto all = si->compute_stats(0);  // every sample
  CHECK(si->normalizer().values().a == all.mean);
  CHECK(si->normalizer().values().b == all.std);
}
