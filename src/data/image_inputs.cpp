#include "data/image_inputs.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "data/dataset.hpp"
#include "data/image_decode.hpp"
#include "data/image_dataset.hpp"

namespace trainer::data {
namespace {
namespace fs = std::filesystem;

std::vector<std::string> inputs_folder_images(const fs::path& folder, bool skip_bad) {
  std::vector<std::string> files, others;
  const FolderListing listing = list_folder_files(folder.string());
  for (const auto& path : listing.files) {
    if (is_decodable_image_name(path)) files.push_back(path);
    else if (is_other_image_name(path)) others.push_back(path);
  }
  // an image named but not readable is an input the user asked about: said, as a file that is no image
  // is (data.on_bad_sample: skip leaves it out, as it leaves out a file that does not decode)
  for (const auto& [path, why] : listing.unreadable) {
    if (!is_decodable_image_name(path)) continue;
    if (!skip_bad) throw DataError(fmt::format("{}: {}", path, why));
    spdlog::warn("{}: {}: left out (data.on_bad_sample: skip)", path, why);
  }
  for (const auto& [path, why] : listing.unlisted)
    throw DataError(fmt::format("{}: cannot list the folder: {}", path, why));
  if (!others.empty())  // named, not dropped silently: trainer decodes JPEG and PNG only
    spdlog::warn("{}: {} image file(s) of a type trainer does not decode (JPEG and PNG only) are not classified, "
                 "the first: {}",
                 folder.string(), others.size(), *std::min_element(others.begin(), others.end()));
  if (files.empty()) throw DataError(fmt::format("{}: the folder holds no .jpg/.jpeg/.png images", folder.string()));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

ImageInputSpec image_input_spec(const config::DataConfig& data, const config::ModelConfig& model, int64_t seed) {
  config::DataConfig d = data;
  d.limit_samples = 0;  // the statistics were computed before the limit applied; the reader is wanted bare
  DatasetPair pair = create_datasets(d, model, seed);
  const auto* train = dynamic_cast<const ImageDataset*>(pair.train.get());
  if (!train) throw DataError(fmt::format("{}: data.format {} does not give images", data.path, config::name_of(data.format)));
  ImageInputSpec spec;
  const auto shape = train->sample_shape();
  spec.channels = shape[0];
  spec.height = shape[1];
  spec.width = shape[2];
  spec.resize = data.val_resize > 0 ? data.val_resize : data.image_size;
  spec.normalizer = train->normalizer();
  spec.classes = train->class_names();
  spec.data_describe = train->describe();
  return spec;
}

std::vector<std::string> expand_image_inputs(const std::vector<std::string>& paths, bool skip_bad) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    const auto st = fs::status(p, ec);
    if (ec || !fs::exists(st)) throw DataError(fmt::format("{}: no such file or folder", p));
    if (fs::is_directory(st)) {
      auto more = inputs_folder_images(p, skip_bad);
      files.insert(files.end(), more.begin(), more.end());
    } else {
      files.push_back(p);  // named on purpose: decoding tells whether it is an image
    }
  }
  return files;
}

torch::Tensor load_image_batch(const std::vector<std::string>& files, const ImageInputSpec& spec) {
  const int64_t c = spec.channels, h = spec.height, w = spec.width, n = static_cast<int64_t>(files.size());
  auto raw = torch::empty({n, c, h, w}, torch::kUInt8);
  std::vector<uint8_t> decoded, tmp, resized;
  std::vector<float> filter;
  for (int64_t i = 0; i < n; ++i) {
    const std::string& file = files[i];
    DecodedImage img;
    try {
      img = decode_image(file, c, spec.resize, decoded, tmp);
    } catch (const std::bad_alloc&) {
      throw DataError(file + ": out of memory while decoding");
    }
    const uint8_t* src = decoded.data();
    if (img.height != h || img.width != w || (spec.resize > 0 && spec.resize != h) || img.scale > 1) {
      // the same resize as data.image_size; a model input that is not square has no such resize
      if (h != w)
        throw DataError(fmt::format("{}: image is {}x{}, the model takes {}x{}", file, img.whole_height, img.whole_width, h,
                                    w));
      resized.resize(c * h * w);
      resize_short_center_crop(src, c, img.height, img.width, resized.data(), spec.resize > 0 ? spec.resize : h, h,
                               filter, {img.scale, img.whole_height, img.whole_width});
      src = resized.data();
    }
    std::memcpy(raw.data_ptr<uint8_t>() + i * c * h * w, src, c * h * w);
  }
  auto out = torch::empty({n, c, h, w}, torch::kFloat32);
  spec.normalizer.apply(raw.data_ptr<uint8_t>(), out.data_ptr<float>(), n, c, h * w);
  return out;
}

}  // namespace trainer::data
