// image_folder: data.path/<class>/<image>, classes = sub-folder names in sorted order (as
// torchvision's ImageFolder), images = *.jpg, *.jpeg, *.png (any case; torchvision's other image
// types, .bmp .ppm .pgm .tif .tiff .webp, are refused or, with data.on_bad_sample: skip, left out
// with a warning; other files are ignored, as torchvision ignores them). Images are decoded in the
// loader's worker threads, resized (shorter side) and centre-cropped to data.image_size. With
// data.image_size = 0 every image must have the size of the first one.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <filesystem>

#include <fmt/format.h>

#include "data/file_util.hpp"
#include "data/file_watch.hpp"
#include "data/image_decode.hpp"
#include "data/readers.hpp"

namespace trainer::data {
namespace {
namespace fs = std::filesystem;

struct FolderIndex {
  std::vector<std::string> classes;
  std::vector<std::string> files;
  std::vector<int64_t> labels;
  std::vector<FileStamp> stamps;  // when scanned: a file deleted or replaced later is a DataChanged
};

// Files of torchvision's other image types (a folder would train on fewer images than torchvision's
// does if they were left out silently): refused (data.on_bad_sample: error), or left out with a
// warning (skip), with their count per extension and the first one.
void check_other_images(const std::string& root, const std::map<std::string, int64_t>& count, const std::string& first,
                        bool skip_bad) {
  if (count.empty()) return;
  int64_t n = 0;
  std::string kinds;
  for (const auto& [ext, k] : count) {
    n += k;
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", k, ext);
  }
  const std::string what = fmt::format(
      "{}: {} image file(s) that torchvision's ImageFolder reads but trainer does not decode (JPEG and PNG only): {}; "
      "the first: {}",
      root, n, kinds, first);
  if (!skip_bad)
    throw DataError(what + ". Convert them to JPEG or PNG, or set data.on_bad_sample: skip to leave them out");
  spdlog::warn("{}: left out (data.on_bad_sample: skip)", what);
}

// Image files whose kind cannot be read (a link to nothing, a loop of links) and folders that cannot
// be listed: torchvision's loader fails on the first such image, so they are bad samples: refused
// (data.on_bad_sample: error), or left out with a warning naming the first (skip). Other names
// (a link loop called `loop`) are ignored, as torchvision ignores them.
void check_unreadable(const std::string& root, const std::string& cls, const FolderListing& listing, bool skip_bad) {
  std::vector<std::pair<std::string, std::string>> bad;
  for (const auto& u : listing.unreadable)
    if (is_decodable_image_name(u.first) || is_other_image_name(u.first)) bad.push_back(u);
  for (const auto& [path, why] : listing.unlisted) bad.emplace_back(path, "cannot list the folder: " + why);
  if (bad.empty()) return;
  const std::string what = fmt::format("{}: class folder '{}': {} image file(s) or folder(s) that cannot be read; the "
                                       "first: {}: {}",
                                       root, cls, bad.size(), bad.front().first, bad.front().second);
  if (!skip_bad) throw DataError(what + ". Remove or repair them, or set data.on_bad_sample: skip to leave them out");
  spdlog::warn("{}: left out (data.on_bad_sample: skip)", what);
}

// The class folders: `root`'s sub-folders (links followed). An entry beside them that cannot be told
// apart (a loop of links, no permission) is a bad sample: refused, or left out with a warning (skip);
// a link to nothing is no folder, as for torchvision.
std::vector<std::string> class_names(const std::string& root, bool skip_bad) {
  std::error_code ec;
  if (root.empty() || !fs::exists(root, ec)) throw DataError(fmt::format("{}: no such folder (data.format image_folder)", root));
  if (!fs::is_directory(root, ec)) throw DataError(root + ": not a folder (image_folder wants one sub-folder per class)");
  std::vector<std::string> names;
  fs::directory_iterator it(root, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::stat(it->path().c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) names.push_back(it->path().filename().string());
      continue;
    }
    if (errno == ENOENT) continue;
    const std::string what = fmt::format("{}: '{}' beside the class folders cannot be read ({})", root,
                                         it->path().filename().string(), std::strerror(errno));
    if (!skip_bad) throw DataError(what + ". Remove or repair it, or set data.on_bad_sample: skip to leave it out");
    spdlog::warn("{}: left out (data.on_bad_sample: skip)", what);
  }
  if (ec) throw DataError(fmt::format("{}: cannot list the folder: {}", root, ec.message()));
  std::sort(names.begin(), names.end());
  if (names.empty()) throw DataError(root + ": the dataset is empty (no class sub-folders)");
  return names;
}

FolderIndex scan(const std::string& root, const std::vector<std::string>& classes, bool skip_bad) {
  FolderIndex idx;
  idx.classes = classes;
  std::map<std::string, int64_t> others;
  std::string first_other;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> files;
    const FolderListing listing = list_folder_files((fs::path(root) / classes[c]).string());
    check_unreadable(root, classes[c], listing, skip_bad);
    if (!listing.repeated.empty())  // a deliberate difference: said, never silent (found from outside)
      spdlog::warn("{}: class folder '{}': {} folder(s) reached again through links, their images counted once "
                   "(torchvision's ImageFolder counts them once per link); the first: {} is {}",
                   root, classes[c], listing.repeated.size(), listing.repeated.front().first,
                   listing.repeated.front().second);
    for (const std::string& path : listing.files) {
      if (is_decodable_image_name(path)) {
        files.push_back(path);
      } else if (is_other_image_name(path)) {
        if (others.empty() || path < first_other) first_other = path;
        ++others[lower_extension(path)];
      }
    }
    if (c + 1 == classes.size() || files.empty()) check_other_images(root, others, first_other, skip_bad);
    if (files.empty())
      throw DataError(fmt::format("{}: class folder '{}' has no .jpg/.jpeg/.png images", root, classes[c]));
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      idx.stamps.push_back(stamp_path(f));  // one stat per file at start-up
      idx.files.push_back(std::move(f));
      idx.labels.push_back(static_cast<int64_t>(c));
    }
  }
  return idx;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

constexpr int64_t kStatsSamples = 512;

class ImageFolderDataset : public ImageDataset {
 public:
  ImageFolderDataset(std::string root, FolderIndex index, ImageOptions opts, int64_t channels, int64_t h, int64_t w)
      : ImageDataset(opts, channels, h, w, static_cast<int64_t>(index.classes.size())),
        root_(std::move(root)),
        index_(std::move(index)) {
    stats_samples_ = kStatsSamples;  // decoding every image just for statistics would take too long
  }

  int64_t size() const override { return static_cast<int64_t>(index_.files.size()); }
  std::vector<int64_t> first_labels(int64_t n) const override {
    return {index_.labels.begin(), index_.labels.begin() + std::min<int64_t>(n, size())};
  }
  std::string describe() const override {
    return fmt::format("image_folder {}: {} images {}x{}x{}, {} classes", root_, size(), channels_, height_, width_,
                       classes_);
  }
  std::vector<std::string> class_names() const override { return index_.classes; }

  // Every header (or, with `decode`, every image whole) as the first epoch would read it, without
  // the epoch: `trainer check` names the files a run would refuse or skip before it starts.
  Audit audit(const AuditOptions& o) const override {
    return audit_each(size(), o, [this, decode = o.decode] {
      return [this, decode, pixels = std::vector<uint8_t>(), tmp = std::vector<uint8_t>()](int64_t i) mutable {
        const std::string& file = index_.files[i];
        try {
          const DecodedImage img = decode ? decode_image(file, channels_, 0, pixels, tmp) : probe_image(file);
          if (opts_.size == 0 && (img.height != height_ || img.width != width_))
            return fmt::format("{}: image is {}x{}, the others {}x{} (set data.image_size to resize)", file,
                               img.height, img.width, height_, width_);
        } catch (const DataError& e) {
          return std::string(e.what());
        } catch (const std::bad_alloc&) {
          return file + ": out of memory while decoding";
        }
        return std::string();
      };
    });
  }

 protected:
  const uint8_t* pixels(int64_t index, ImageScratch& s, int64_t* label) const override {
    const std::string& file = index_.files[index];
    *label = index_.labels[index];
    DecodedImage img;
    try {
      img = decode_image(file, channels_, opts_.resize > 0 ? opts_.resize : opts_.size, s.decoded, s.tmp);
      if (opts_.size == 0 && (img.height != height_ || img.width != width_))
        throw DataError(fmt::format("{}: image is {}x{}, the others {}x{} (set data.image_size to resize)", file,
                                    img.height, img.width, height_, width_));
    } catch (const DataError& e) {
      return bad_sample(e.what(), index);
    } catch (const std::bad_alloc&) {  // within the size limits, but this machine has no room for it now
      return bad_sample(file + ": out of memory while decoding", index);
    }
    check_unchanged_file(index);
    return fit(s.decoded.data(), img.height, img.width, s, {img.scale, img.whole_height, img.whole_width});
  }

  // RandomResizedCrop cuts from the whole decoded image, as torchvision's ImageNet recipe does.
  const uint8_t* source(int64_t index, ImageScratch& s, int64_t* label, int64_t* h, int64_t* w) const override {
    const std::string& file = index_.files[index];
    *label = index_.labels[index];
    try {
      DecodedImage img = decode_image(file, channels_, /*min_side=*/0, s.decoded, s.tmp);
      *h = img.height;
      *w = img.width;
    } catch (const DataError& e) {
      return bad_sample(e.what(), index);
    } catch (const std::bad_alloc&) {
      return bad_sample(file + ": out of memory while decoding", index);
    }
    check_unchanged_file(index);
    return s.decoded.data();
  }

  // RandomResizedCrop decodes only its box, at the coarsest DCT scale that keeps the box at least
  // the output size (image_decode.hpp): the same box as a full decode, pixels within the tolerance
  // tests/data measures (DCT scaling resamples slightly differently from the bilinear filter).
  const uint8_t* resized_crop_of(int64_t index, ImageScratch& s, int64_t* label,
                                 const std::function<CropBox(int64_t, int64_t)>& choose) const override {
    const std::string& file = index_.files[index];
    *label = index_.labels[index];
    RegionImage region;
    try {
      region = decode_image_region(file, channels_, choose, height_, width_, s.decoded, s.tmp);
    } catch (const DataError& e) {
      return bad_sample(e.what(), index);
    } catch (const std::bad_alloc&) {
      return bad_sample(file + ": out of memory while decoding", index);
    }
    check_unchanged_file(index);
    uint8_t* out = output(s, s.cropped);
    resize_bilinear_window(s.decoded.data(), channels_, region.height, region.width, region.window, out, height_,
                           width_, s.filter);
    return out;
  }

  // After each read (one stat): a file deleted or replaced since the scan ends the run (or reloads
  // it, data.on_change) whatever data.on_bad_sample says; only the files as scanned are the dataset.
  void check_unchanged_file(int64_t index) const {
    const std::string& file = index_.files[index];
    if (std::string change = describe_change(file, index_.stamps[index]); !change.empty())
      throw DataChanged(file, change);
  }

  const uint8_t* bad_sample(const std::string& error, int64_t index) const {
    check_unchanged_file(index);  // not a bad sample: a changed file
    std::string what = fmt::format("{} (sample {})", error, index);
    if (!opts_.skip_bad) throw DataError(what);
    note_skip(what);
    return nullptr;
  }

 private:
  std::string root_;
  FolderIndex index_;
};

std::shared_ptr<ImageFolderDataset> open_folder(const std::string& root, const std::vector<std::string>& classes,
                                                const ImageOptions& opts, int64_t channels) {
  FolderIndex idx = scan(root, classes, opts.skip_bad);
  int64_t h = opts.size, w = opts.size;
  if (opts.size == 0) {  // the output size is the first image's (the first readable one, when skipping)
    for (size_t i = 0; i < idx.files.size() && h == 0; ++i) {
      try {
        DecodedImage first = probe_image(idx.files[i]);
        h = first.height;
        w = first.width;
      } catch (const DataError& e) {
        if (!opts.skip_bad) throw;
        // every file bad: said as such (the last one's error alone read as if skip had been ignored)
        if (i + 1 == idx.files.size())
          throw DataError(fmt::format("{}: none of its {} image(s) could be decoded (data.on_bad_sample: skip "
                                      "skips bad ones, but one is needed for the image size); the last: {}",
                                      root, idx.files.size(), e.what()));
        spdlog::warn("skipping bad sample while probing the image size: {} (sample {})", e.what(), i);
      }
    }
  }
  return std::make_shared<ImageFolderDataset>(root, std::move(idx), opts, channels, h, w);
}

}  // namespace

DatasetPair open_image_folder(const config::DataConfig& data, const ImageOptions& opts, int64_t channels) {
  std::vector<std::string> classes = class_names(data.path, opts.skip_bad);
  DatasetPair pair;
  pair.train = open_folder(data.path, classes, opts, channels);
  if (!data.val_path.empty()) {
    std::vector<std::string> val_classes = class_names(data.val_path, opts.skip_bad);
    if (val_classes != classes) {
      std::vector<std::string> only_train, only_val;
      std::set_difference(classes.begin(), classes.end(), val_classes.begin(), val_classes.end(),
                          std::back_inserter(only_train));
      std::set_difference(val_classes.begin(), val_classes.end(), classes.begin(), classes.end(),
                          std::back_inserter(only_val));
      throw DataError(fmt::format("class folders differ between {} and {}: only in train: {}; only in val: {}",
                                  data.path, data.val_path, join(only_train), join(only_val)));
    }
    const ImageOptions vo = validation_options(opts);
    pair.val = open_folder(data.val_path, classes, vo, channels);
  }
  return pair;
}

}  // namespace trainer::data
