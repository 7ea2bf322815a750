// MNIST / Fashion-MNIST IDX files (http://yann.lecun.com/exdb/mnist/ format), gzip'd or raw.
// data.path is either a folder holding train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]
// (validation: the t10k-* files of the same folder), or an images file whose labels file has the
// same name with images-idx3 replaced by labels-idx1. data.val_path takes the same two forms.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

struct IdxHeader {
  std::vector<int64_t> dims;
  uint64_t file_bytes = 0;  // header + data, as the dims promise
};

// Checks the IDX header (magic 0x0000 08 NDIMS, big-endian uint32 dims) and what the dims promise:
// their product is computed overflow-safe, and the file must hold exactly that many bytes (checked
// by read_file_bytes against the real size, or the inflated size of a .gz, before allocating).
IdxHeader parse_header(const std::string& path, int ndims) {
  const uint64_t header_bytes = 4u + 4u * ndims;
  const std::vector<uint8_t> b = read_file_prefix(path, header_bytes);
  if (b.size() < 4 || b[0] != 0 || b[1] != 0 || b[2] != kIdxUnsignedByte || b[3] != ndims) {
    uint32_t magic = b.size() >= 4 ? read_be32(b.data()) : 0;
    throw DataError(fmt::format("{}: wrong magic number 0x{:08x}, expected 0x{:08x} (IDX unsigned-byte, {} dims)",
                                path, magic, 0x800u + ndims, ndims));
  }
  if (b.size() < header_bytes) throw DataError(path + ": truncated IDX header");
  IdxHeader h;
  uint64_t total = 1;
  bool overflow = false;
  for (int d = 0; d < ndims; ++d) {
    h.dims.push_back(read_be32(b.data() + 4 + 4 * d));
    overflow |= __builtin_mul_overflow(total, static_cast<uint64_t>(h.dims.back()), &total);
  }
  if (std::find(h.dims.begin() + 1, h.dims.end(), 0) != h.dims.end())  // dims after the count: an image's sides
    throw DataError(fmt::format("{}: the IDX header gives an image side of 0 ({})", path, fmt::join(h.dims, "x")));
  if (overflow || __builtin_add_overflow(total, header_bytes, &h.file_bytes))
    throw DataError(fmt::format("{}: the IDX header dims {} overflow 64-bit arithmetic (corrupt header)", path,
                                fmt::join(h.dims, "x")));
  return h;
}

// The whole file, exactly as large as its header says.
std::vector<uint8_t> read_checked(const std::string& path, const IdxHeader& h, ImageBlock& block) {
  FileStamp stamp;
  std::vector<uint8_t> b = read_file_bytes(
      path, h.file_bytes, fmt::format("the IDX header promises {} bytes for {}", h.file_bytes, fmt::join(h.dims, "x")),
      &stamp);
  block.files.emplace_back(path, stamp);
  if (b.size() < h.file_bytes)
    throw DataError(fmt::format("{}: truncated: {} bytes of data, the header promises {}", path, b.size(), h.file_bytes));
  return b;
}

ImageBlock read_pair(const IdxFiles& f) {
  const IdxHeader hi = parse_header(f.images, 3), hl = parse_header(f.labels, 1);  // (N, H, W), (N)
  if (hi.dims[0] != hl.dims[0])
    throw DataError(fmt::format("{}: {} labels but {} has {} images", f.labels, hl.dims[0], f.images, hi.dims[0]));
  ImageBlock b;
  std::vector<uint8_t> img = read_checked(f.images, hi, b), lab = read_checked(f.labels, hl, b);
  b.source = f.images;
  b.label_source = f.labels;
  b.count = hi.dims[0];
  b.channels = 1;
  b.height = hi.dims[1];
  b.width = hi.dims[2];
  img.erase(img.begin(), img.begin() + 16);  // the sizes were checked: 16 + count * height * width bytes
  b.pixels = std::move(img);
  b.labels.assign(lab.begin() + 8, lab.end());
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
    const ImageOptions vo = validation_options(opts);
    pair.val = std::make_shared<MemoryImageDataset>("idx", read_pair(val), classes, vo);
  }
  return pair;
}

}  // namespace trainer::data
