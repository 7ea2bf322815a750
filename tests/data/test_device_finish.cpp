// Fewer copies in the image pipeline (issue 27):
//  - Dataset::finish_tensor: the normalisation a GPU run does on the device, after copying the raw
//    uint8 batch, gives the host's finish() floats bit for bit, in either memory format. It is torch
//    operations, so the CPU runs the very code the GPU runs (the [gpu] loader test runs it there).
//  - A resize to the output size writes into the batch's slot when no augmentation follows it: the
//    bytes are those of the path through the scratch buffers (a flip of the same crop, unflipped).
#include <catch2/catch.hpp>
#include <torch/cuda.h>

#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "data/transforms.hpp"
#include "fixtures.hpp"
#include "skip.hpp"

using namespace trainer;
using namespace trainer::test;

namespace {

std::vector<int> labels_of(int n, int classes) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i % classes);
  return v;
}

// A raw batch of every byte value in every channel (and random ones after them).
torch::Tensor raw_batch(int64_t b, int64_t c, int64_t h, int64_t w) {
  auto raw = torch::randint(0, 256, {b, c, h, w}, torch::TensorOptions().dtype(torch::kUInt8));
  auto flat = raw.view({b, c, h * w});
  const int64_t n = std::min<int64_t>(256, h * w);
  flat.index_put_({0, torch::indexing::Slice(), torch::indexing::Slice(0, n)},
                  torch::arange(n, torch::kLong).to(torch::kUInt8).expand({c, n}));
  return raw;
}

void check_finish_tensor(const data::Dataset& ds, const std::string& what) {
  INFO(what);
  REQUIRE(ds.finishes_anywhere());
  const auto shape = ds.sample_shape();  // (C, H, W)
  const auto raw = raw_batch(3, shape[0], shape[1], shape[2]);
  const auto host = ds.finish(raw, /*pin=*/false);
  const auto plain = ds.finish_tensor(raw, /*channels_last=*/false);
  const auto cl = ds.finish_tensor(raw, /*channels_last=*/true);
  CHECK(plain.scalar_type() == torch::kFloat32);
  CHECK(plain.sizes() == host.sizes());
  CHECK(plain.is_contiguous());
  CHECK(torch::equal(plain, host));  // bit for bit
  CHECK(cl.sizes() == host.sizes());
  CHECK(cl.is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(torch::equal(cl, host));
  // a batch cut short by skipped samples (a narrowed raw batch)
  CHECK(torch::equal(ds.finish_tensor(raw.narrow(0, 0, 2), true), host.narrow(0, 0, 2)));
}

}  // namespace

TEST_CASE("finish_tensor gives finish()'s floats bit for bit: IDX, CIFAR and image folders, each normalisation, "
          "contiguous and channels-last", "[unit]") {
  auto dir = scratch_dir("device_finish");
  write_idx(dir / "idx", "train", labels_of(12, 10), 7, 5, false);
  write_cifar(dir / "cifar" / "data_batch_1.bin", labels_of(12, 10), false);
  write_image_folder(dir / "folder", {"a", "b"}, 3, 9, 11, /*png=*/true);
  struct Case {
    std::string format, path;
    config::ModelConfig model;
  };
  const std::vector<Case> cases = {{"idx", (dir / "idx").string(), resnet(1, 10)},
                                   {"cifar", (dir / "cifar").string(), resnet(3, 10)},
                                   {"image_folder", (dir / "folder").string(), resnet(3, 2)}};
  for (const auto& c : cases) {
    for (const auto mode : {config::NormalizeMode::MeanStd, config::NormalizeMode::Minmax, config::NormalizeMode::None}) {
      auto cfg = plain_data_cfg(c.format, c.path);
      cfg.normalize.mode = mode;  // mean_std and minmax: statistics computed from the files
      if (c.format == "image_folder") cfg.image_size = 6;
      const auto pair = data::create_datasets(cfg, c.model, 0);
      check_finish_tensor(*pair.train, c.format + " normalize " + std::to_string(static_cast<int>(mode)));
    }
  }
  auto limited = plain_data_cfg("idx", dir / "idx");  // data.limit_samples wraps the dataset: it forwards
  limited.limit_samples = 5;
  check_finish_tensor(*data::create_datasets(limited, resnet(1, 10), 0).train, "idx, limit_samples 5");
}

TEST_CASE("token datasets finish on the host only: finishes_anywhere is false and finish_tensor says why", "[unit]") {
  auto dir = scratch_dir("device_finish_tokens");
  std::vector<uint16_t> tokens(400);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 50);
  write_nanogpt(dir / "train.bin", tokens);
  auto cfg = plain_data_cfg("tokens", dir / "train.bin");
  const auto ds = data::create_datasets(cfg, gpt(8, 64), 0).train;
  CHECK_FALSE(ds->finishes_anywhere());
  CHECK_THROWS_WITH(ds->finish_tensor(torch::zeros({2, 8}, torch::kLong), false),
                    Catch::Contains("finishes its batches on the host only"));
}

TEST_CASE("a resize written straight into the batch's slot gives the bytes of the path through scratch "
          "(IDX resized, RandomResizedCrop, image folders)", "[unit]") {
  auto dir = scratch_dir("slot_resize");
  write_idx(dir / "idx", "train", labels_of(16, 10), 12, 12, false);
  write_image_folder(dir / "folder", {"a", "b"}, 4, 20, 30, /*png=*/false);  // JPEG: the region decode
  struct Case {
    std::string format, path;
    config::ModelConfig model;
    int64_t size;
  };
  const std::vector<Case> cases = {{"idx", (dir / "idx").string(), resnet(1, 10), 16},  // 12 -> 16: fit() resizes
                                   {"image_folder", (dir / "folder").string(), resnet(3, 2), 8}};
  for (const auto& c : cases) {
    for (const bool rrc : {false, true}) {
      INFO(c.format << (rrc ? ", RandomResizedCrop" : ", no RandomResizedCrop"));
      auto cfg = plain_data_cfg(c.format, c.path);
      cfg.image_size = c.size;
      cfg.augment.random_resized_crop = rrc;
      const auto in_slot = data::create_datasets(cfg, c.model, 3).train;  // nothing after the resize
      cfg.augment.hflip = true;  // a flip after it: the resize goes to scratch, the flip copies it over
      const auto via_scratch = data::create_datasets(cfg, c.model, 3).train;
      int flipped = 0, kept = 0;
      for (int64_t index = 0; index < in_slot->size(); ++index) {
        const int64_t epoch = 2;
        const bool flip = data::augment_choice(cfg.augment, 3, epoch, index).flip;
        const auto a = in_slot->get(index, epoch, /*augment=*/true).input;  // (C, H, W)
        const auto b = via_scratch->get(index, epoch, /*augment=*/true).input;
        INFO("sample " << index << (flip ? " (flipped)" : ""));
        CHECK(torch::equal(flip ? a.flip({2}) : a, b));
        (flip ? flipped : kept) += 1;
      }
      CHECK(flipped > 0);  // both branches compared
      CHECK(kept > 0);
    }
  }
}

TEST_CASE("on a GPU, image batches cross as uint8 and are normalised there: the host's float batches, "
          "contiguous and channels-last", "[gpu]") {
  if (!torch::cuda::is_available()) TRAINER_SKIP("no CUDA device");
  auto dir = scratch_dir("device_finish_gpu");
  write_cifar(dir / "data_batch_1.bin", labels_of(100, 10), false);
  auto cfg = plain_data_cfg("cifar", dir);
  cfg.normalize.mode = config::NormalizeMode::MeanStd;  // computed statistics: a table that is not x / 255
  cfg.augment.hflip = true;
  const auto ds = data::create_datasets(cfg, resnet(3, 10), 0).train;
  for (const bool channels_last : {false, true}) {
    for (const int64_t workers : {0, 2}) {
      INFO((channels_last ? "channels-last, " : "contiguous, ") << workers << " workers");
      data::LoaderOptions host_opts;
      host_opts.batch_size = 16;
      host_opts.workers = workers;
      host_opts.seed = 5;
      auto device_opts = host_opts;
      device_opts.pin_memory = true;
      device_opts.device_index = 0;
      device_opts.channels_last = channels_last;
      REQUIRE(device_opts.finish_on_device);  // the default
      data::DataLoader host(ds, host_opts), device(ds, device_opts);
      for (int k = 0; k < 14; ++k) {  // crosses an epoch (6 batches of 16)
        auto h = host.next(), d = device.next();
        REQUIRE(d->input.is_cuda());
        CHECK(d->input.is_contiguous(channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous));
        CHECK(torch::equal(d->input.cpu(), h->input));
        CHECK(torch::equal(d->target.cpu(), h->target));
      }
    }
  }
}

// A run ended with 16 workers and 16 prefetched batches on an H200 once died of a segfault after its
// last step (the same run with 4 prefetched batches did not): the loader destroyed while many workers
// copy and normalise batches on their streams, and while finished device batches wait in its buffer.
TEST_CASE("on a GPU, a loader with 16 workers destroyed while batches are copied and normalised, 20 times",
          "[gpu]") {
  if (!torch::cuda::is_available()) TRAINER_SKIP("no CUDA device");
  auto dir = scratch_dir("device_finish_gpu_teardown");
  write_cifar(dir / "data_batch_1.bin", labels_of(400, 10), false);
  auto cfg = plain_data_cfg("cifar", dir);
  cfg.augment.hflip = true;
  const auto ds = data::create_datasets(cfg, resnet(3, 10), 0).train;
  data::LoaderOptions host_opts;
  host_opts.batch_size = 8;
  host_opts.workers = 2;
  host_opts.seed = 3;
  data::DataLoader host(ds, host_opts);
  const auto first = host.next();
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    auto o = host_opts;
    o.workers = 16;
    o.prefetch = 16;
    o.pin_memory = true;
    o.device_index = 0;
    o.channels_last = round % 2 == 1;
    data::DataLoader device(ds, o);
    auto d = device.next();  // the first batch, whichever of the 16 threads built it
    REQUIRE(d->input.is_cuda());
    CHECK(torch::equal(d->input.cpu().contiguous(), first->input));
    // round k leaves after k % 3 more batches: the others are in flight or waiting on the device
    for (int k = 0; k < round % 3; ++k) REQUIRE(device.next());
  }
  torch::cuda::synchronize();
}
