// MNIST / Fashion-MNIST IDX files (http://yann.lecun.com/exdb/mnist/ format), gzip'd or raw.
// data.path is either a folder holding train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]
// (validation: the t10k-* files of the same folder), or an images file whose labels file has the
// same name with images-idx3 replaced by labels-idx1. data.val_path takes the same two forms.
#include <filesystem>

#include <fmt/format.h>

#include "data/file_util.hpp"
#include "data/memory_images.hpp"
#include "data/readers.hpp"

namespace trainer::data {
namespace {
namespace fs = std::filesystem;

constexpr uint8_t kIdxUnsignedByte = 0x08;

struct IdxFiles {
  std::string images, labels;
};

// The images/labels pair for `prefix` ("train" or "t10k") in a folder; "" when absent.
std::string find_in_folder(const fs::path& dir, const std::string& name) {
  for (const char* ext : {".gz", ""}) {
    fs::path p = dir / (name + ext);
    if (fs::exists(p)) return p.string();
  }
  return "";
}

IdxFiles locate(const std::string& path, const std::string& prefix, bool required) {
  if (path.empty() || !fs::exists(path)) throw DataError(fmt::format("{}: no such file or folder (data.format idx)", path));
  IdxFiles f;
  if (fs::is_directory(path)) {
    f.images = find_in_folder(path, prefix + "-images-idx3-ubyte");
    f.labels = find_in_folder(path, prefix + "-labels-idx1-ubyte");
    if (f.images.empty() && f.labels.empty() && !required) return f;
    if (f.images.empty() || f.labels.empty())
      throw DataError(fmt::format("{}: missing {}-{}-ubyte[.gz] (an idx folder holds {}-images-idx3-ubyte and "
                                  "{}-labels-idx1-ubyte, gzip'd or not)",
                                  path, prefix, f.images.empty() ? "images-idx3" : "labels-idx1", prefix, prefix));
    return f;
  }
  f.images = path;
  std::string name = fs::path(path).filename().string();
  auto pos = name.find("images-idx3");
  if (pos == std::string::npos)
    throw DataError(path + ": an idx images file name must contain 'images-idx3' (to find its labels-idx1 file)");
  f.labels = (fs::path(path).parent_path() / name.replace(pos, 11, "labels-idx1")).string();
  if (!fs::exists(f.labels)) throw DataError(fmt::format("{}: labels file not found (for images {})", f.labels, path));
  return f;
}

// Checks the IDX header (magic 0x0000 08 NDIMS, big-endian dims) and returns the dims.
std::vector<int64_t> parse_header(const std::vector<uint8_t>& b, const std::string& path, int ndims) {
  if (b.size() < 4 || b[0] != 0 || b[1] != 0 || b[2] != kIdxUnsignedByte || b[3] != ndims) {
    uint32_t magic = b.size() >= 4 ? read_be32(b.data()) : 0;
    throw DataError(fmt::format("{}: wrong magic number 0x{:08x}, expected 0x{:08x} (IDX unsigned-byte, {} dims)",
                                path, magic, 0x800u + ndims, ndims));
  }
  if (b.size() < 4u + 4u * ndims) throw DataError(path + ": truncated IDX header");
  std::vector<int64_t> dims;
  int64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    dims.push_back(read_be32(b.data() + 4 + 4 * d));
    total *= dims.back();
  }
  uint64_t expected = 4 + 4 * ndims + total;
  if (b.size() < expected)
    throw DataError(fmt::format("{}: truncated: {} bytes of data, the header promises {}", path, b.size(), expected));
  return dims;
}

ImageBlock read_pair(const IdxFiles& f) {
  std::vector<uint8_t> img = read_file_bytes(f.images), lab = read_file_bytes(f.labels);
  auto di = parse_header(img, f.images, 3);  // (N, H, W)
  auto dl = parse_header(lab, f.labels, 1);  // (N)
  if (di[0] != dl[0])
    throw DataError(fmt::format("{}: {} labels but {} has {} images", f.labels, dl[0], f.images, di[0]));
  ImageBlock b;
  b.source = f.images;
  b.label_source = f.labels;
  b.count = di[0];
  b.channels = 1;
  b.height = di[1];
  b.width = di[2];
  b.pixels.assign(img.begin() + 16, img.begin() + 16 + b.count * b.height * b.width);
  b.labels.assign(lab.begin() + 8, lab.begin() + 8 + b.count);
  return b;
}

}  // namespace

DatasetPair open_idx(const config::DataConfig& data, const ImageOptions& opts, int64_t classes) {
  DatasetPair pair;
  pair.train = std::make_shared<MemoryImageDataset>("idx", read_pair(locate(data.path, "train", true)), classes, opts);
  IdxFiles val;  // an explicit images file has no implied validation files
  if (!data.val_path.empty()) val = locate(data.val_path, "t10k", true);
  else if (fs::is_directory(data.path)) val = locate(data.path, "t10k", false);
  if (!val.images.empty()) {
    ImageOptions vo = opts;
    vo.augment = {};
    pair.val = std::make_shared<MemoryImageDataset>("idx", read_pair(val), classes, vo);
  }
  return pair;
}

}  // namespace trainer::data
