// bench_loader: samples/s of the DataLoader alone (no model), for the three real formats:
//   Fashion-MNIST (Debian package) with crop_padding 2 + hflip, byte-level token shards
//   (block 256), and a generated folder of 512 JPEGs of 64x64 (resized to 56).
// Usage: bench_loader [WORK_DIR] [WORKERS]   (WORK_DIR: where the generated files go)
#include <chrono>
#include <cstring>
#include <vector>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "data/file_watch.hpp"
#include "data/image_decode.hpp"
#include "data/loader.hpp"
#include "data/prepare_text.hpp"
#include "models/builtin.hpp"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

double measure(const std::shared_ptr<data::Dataset>& ds, int64_t batch, int64_t workers, int64_t batches) {
  data::LoaderOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.prefetch = 8;
  o.train = true;
  data::DataLoader loader(ds, o);
  loader.next();  // warm-up: threads started, first batch built
  auto t0 = std::chrono::steady_clock::now();
  int64_t samples = 0;
  for (int64_t k = 0; k < batches; ++k) samples += loader.next()->input.size(0);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return samples / s;
}

void report(const std::string& name, const std::shared_ptr<data::Dataset>& ds, int64_t batch, int64_t batches,
            int64_t max_workers) {
  for (int64_t w = 0; w <= max_workers; w = w == 0 ? 1 : w * 2)
    std::printf("%-44s workers=%lld  %10.0f samples/s\n", name.c_str(), static_cast<long long>(w),
                measure(ds, batch, w, batches));
}

// What the SIGBUS guard costs a token window (issue 31): (block + 1) uint16 tokens copied out of a
// mapping at pseudo-random offsets through guarded_copy, and through a plain memcpy, in this binary.
void guard_cost(const fs::path& file, int64_t block) {
  const auto bytes = static_cast<int64_t>(fs::file_size(file));
  const size_t n = static_cast<size_t>(block + 1) * 2;
  if (bytes < static_cast<int64_t>(n) * 2) return;
  FILE* f = std::fopen(file.c_str(), "rb");
  std::vector<char> src(static_cast<size_t>(bytes)), dst(n);  // the bytes in memory: no page faults timed
  if (std::fread(src.data(), 1, src.size(), f) != src.size()) std::fprintf(stderr, "short read of %s\n", file.c_str());
  std::fclose(f);
  auto time_copies = [&](bool guarded) {
    uint64_t x = 88172645463325252ull, sum = 0;
    const int64_t copies = 2'000'000;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < copies; ++k) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const char* from = src.data() + x % static_cast<uint64_t>(bytes - static_cast<int64_t>(n));
      if (guarded) {
        if (!data::guarded_copy(dst.data(), from, n)) std::abort();
      } else {
        std::memcpy(dst.data(), from, n);
      }
      sum += static_cast<unsigned char>(dst[k % n]);  // keeps the copies
    }
    const double ns = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e9 / copies;
    if (sum == 1) std::printf(" ");
    return ns;
  };
  time_copies(false);  // warm-up
  const double plain = time_copies(false), guarded = time_copies(true);
  std::printf("%-44s plain memcpy %6.1f ns, guarded_copy %6.1f ns a window (+%.1f ns)\n",
              fmt::format("token window copy, block {}", block).c_str(), plain, guarded, guarded - plain);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] == '-') {
    std::cerr << "usage: bench_loader [WORK_DIR [MAX_WORKERS]]\n"
                 "  loader throughput (samples/s) for Fashion-MNIST, token shards and a generated JPEG folder;\n"
                 "  WORK_DIR (default: $TMPDIR/trainer_bench_loader) receives the generated data\n";
    return argv[1] == std::string("-h") || argv[1] == std::string("--help") ? 0 : 2;
  }
  models::register_builtin_archs();  // the data readers ask the model family for its input rules
  fs::path work = argc > 1 ? argv[1] : fs::temp_directory_path() / "trainer_bench_loader";
  int64_t max_workers = argc > 2 ? std::stoll(argv[2]) : 2;
  fs::create_directories(work);

  config::ModelConfig resnet;
  resnet.in_channels = 1;
  resnet.num_classes = 10;
  if (fs::exists("/usr/share/datasets/fashion-mnist")) {
    config::DataConfig d;
    d.format = config::DataFormat::Idx;
    d.path = "/usr/share/datasets/fashion-mnist";
    d.augment.crop_padding = 2;
    d.augment.hflip = true;
    report("fashion-mnist 1x28x28, crop 2 + hflip, B=128", data::create_datasets(d, resnet, 0).train, 128, 400,
           max_workers);
  }

  // token shards: 4M bytes of pseudo-text through prepare-text
  fs::path text = work / "corpus.txt";
  if (!fs::exists(text)) {
    std::string s(4 << 20, ' ');
    uint64_t x = 88172645463325252ull;
    for (auto& c : s) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      c = static_cast<char>('a' + x % 26);
    }
    FILE* f = std::fopen(text.c_str(), "wb");
    std::fwrite(s.data(), 1, s.size(), f);
    std::fclose(f);
    data::cmd_prepare_text(text.string(), (work / "shards").string(), 1 << 20, 0.05);
  }
  config::ModelConfig gpt;
  gpt.arch = "gpt";
  gpt.block_size = 256;
  config::DataConfig t;
  t.format = config::DataFormat::Tokens;
  t.path = (work / "shards").string();
  report("token shards, block 256, B=64", data::create_datasets(t, gpt, 0).train, 64, 400, max_workers);
  for (const auto& e : fs::directory_iterator(work / "shards"))
    if (e.path().filename().string().find("train") != std::string::npos) {
      guard_cost(e.path(), 256);
      break;
    }

  // JPEG folder: 512 images 64x64 in 8 classes
  fs::path jpg = work / "jpeg";
  if (!fs::exists(jpg)) {
    std::vector<uint8_t> px(64 * 64 * 3);
    for (int i = 0; i < 512; ++i) {
      for (size_t k = 0; k < px.size(); ++k) px[k] = static_cast<uint8_t>((k * (i + 3) / 7 + i) % 256);
      fs::path dir = jpg / fmt::format("class{}", i % 8);
      fs::create_directories(dir);
      data::write_jpeg((dir / fmt::format("{:04d}.jpg", i)).string(), px.data(), 64, 64, 3, 90);
    }
  }
  config::ModelConfig rgb;
  rgb.in_channels = 3;
  rgb.num_classes = 8;
  config::DataConfig j;
  j.format = config::DataFormat::ImageFolder;
  j.path = jpg.string();
  j.image_size = 56;
  j.augment.hflip = true;
  report("jpeg folder 512 x 64x64 -> 56, hflip, B=64", data::create_datasets(j, rgb, 0).train, 64, 40, max_workers);
  return 0;
}
