// CIFAR-10 / CIFAR-100 binary versions (https://www.cs.toronto.edu/~kriz/cifar.html).
// CIFAR-10 records: 1 label byte + 3072 pixel bytes (1024 R, 1024 G, 1024 B: already planar),
// in data_batch_1..5.bin (train) and test_batch.bin. CIFAR-100 records: coarse label, fine label,
// 3072 pixels, in train.bin and test.bin; the fine label (100 classes) is used.
// data.path: the folder (or its cifar-10-batches-bin / cifar-100-binary sub-folder), or one .bin
// file (train.bin / test.bin are CIFAR-100, any other name CIFAR-10). data.val_path: same forms.
#include <filesystem>

#include <fmt/format.h>

#include "data/file_util.hpp"
#include "data/memory_images.hpp"
#include "data/readers.hpp"

namespace trainer::data {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kPixels = 3 * 32 * 32;

struct CifarFiles {
  std::vector<std::string> train, val;
  bool hundred = false;
};

CifarFiles locate(const std::string& path) {
  if (path.empty() || !fs::exists(path)) throw DataError(fmt::format("{}: no such file or folder (data.format cifar)", path));
  CifarFiles f;
  if (!fs::is_directory(path)) {
    std::string name = fs::path(path).filename().string();
    f.hundred = name == "train.bin" || name == "test.bin";
    f.train = {path};
    return f;
  }
  fs::path dir = path;
  for (const char* sub : {"cifar-10-batches-bin", "cifar-100-binary"})
    if (fs::is_directory(dir / sub)) dir /= sub;
  if (fs::exists(dir / "train.bin")) {
    f.hundred = true;
    f.train = {(dir / "train.bin").string()};
    if (fs::exists(dir / "test.bin")) f.val = {(dir / "test.bin").string()};
    return f;
  }
  for (int i = 1; i <= 5; ++i)
    if (fs::exists(dir / fmt::format("data_batch_{}.bin", i))) f.train.push_back((dir / fmt::format("data_batch_{}.bin", i)).string());
  if (f.train.empty())
    throw DataError(fmt::format("{}: no CIFAR files (expected data_batch_1..5.bin + test_batch.bin for CIFAR-10, "
                                "or train.bin + test.bin for CIFAR-100)",
                                path));
  if (fs::exists(dir / "test_batch.bin")) f.val = {(dir / "test_batch.bin").string()};
  return f;
}

ImageBlock read_files(const std::vector<std::string>& files, bool hundred) {
  const int64_t label_bytes = hundred ? 2 : 1, record = label_bytes + kPixels;
  ImageBlock b;
  b.channels = 3;
  b.height = b.width = 32;
  for (const auto& path : files) {
    FileStamp stamp;
    std::vector<uint8_t> bytes = read_file_bytes(path, UINT64_MAX, "", &stamp);
    b.files.emplace_back(path, stamp);
    if (bytes.empty() || bytes.size() % record != 0)
      throw DataError(fmt::format("{}: {} bytes is not a whole number of {}-byte CIFAR-{} records (truncated or "
                                  "not a CIFAR binary file)",
                                  path, bytes.size(), record, hundred ? 100 : 10));
    int64_t n = static_cast<int64_t>(bytes.size()) / record;
    b.pixels.reserve(b.pixels.size() + n * kPixels);
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* r = bytes.data() + i * record;
      b.labels.push_back(r[label_bytes - 1]);  // CIFAR-100: the fine label
      b.pixels.insert(b.pixels.end(), r + label_bytes, r + record);
    }
    b.count += n;
    b.source += (b.source.empty() ? "" : ",") + path;
  }
  b.label_source = b.source;
  return b;
}

}  // namespace

DatasetPair open_cifar(const config::DataConfig& data, const ImageOptions& opts) {
  CifarFiles f = locate(data.path);
  int64_t classes = f.hundred ? 100 : 10;
  DatasetPair pair;
  pair.train = std::make_shared<MemoryImageDataset>("cifar", read_files(f.train, f.hundred), classes, opts);
  std::vector<std::string> val = f.val;
  bool val_hundred = f.hundred;
  if (!data.val_path.empty()) {
    CifarFiles v = locate(data.val_path);
    val = v.train;  // a folder given as val_path: its training files are what was asked for
    val_hundred = v.hundred;
    if (fs::is_directory(data.val_path) && !v.val.empty()) val = v.val;
  }
  if (!val.empty()) {
    if (val_hundred != f.hundred)
      throw DataError(fmt::format("{}: CIFAR-{} validation data for CIFAR-{} training data {}", data.val_path,
                                  val_hundred ? 100 : 10, f.hundred ? 100 : 10, data.path));
    const ImageOptions vo = validation_options(opts);
    pair.val = std::make_shared<MemoryImageDataset>("cifar", read_files(val, f.hundred), classes, vo);
  }
  return pair;
}

}  // namespace trainer::data
