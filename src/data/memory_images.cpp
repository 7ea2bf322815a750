#include "data/memory_images.hpp"

#include <fmt/format.h>

namespace trainer::data {
namespace {
int64_t output_side(const ImageOptions& o, int64_t native) { return o.size > 0 ? o.size : native; }
}  // namespace

MemoryImageDataset::MemoryImageDataset(std::string format, ImageBlock block, int64_t classes, ImageOptions opts)
    : ImageDataset(opts, block.channels, output_side(opts, block.height), output_side(opts, block.width), classes),
      format_(std::move(format)),
      block_(std::move(block)) {
  index_.reserve(block_.count);
  for (int64_t i = 0; i < block_.count; ++i) {
    int64_t y = block_.labels[i];
    if (y >= 0 && y < classes) {
      index_.push_back(i);
      continue;
    }
    std::string what = fmt::format("{}: sample {} has label {}, outside [0, {}) (model.num_classes = {})",
                                   block_.label_source, i, y, classes, classes);
    if (!opts_.skip_bad) throw DataError(what);
    note_skip(what);
  }
  if (index_.empty()) throw DataError(block_.source + ": the dataset is empty (no usable samples)");
}

std::string MemoryImageDataset::describe() const {
  return fmt::format("{} {}: {} images {}x{}x{}, {} classes", format_, block_.source, size(), channels_, height_,
                     width_, classes_);
}

void MemoryImageDataset::check_unchanged() const {
  for (const auto& [path, stamp] : block_.files)
    if (std::string change = describe_change(path, stamp); !change.empty()) throw DataChanged(path, change);
}

const uint8_t* MemoryImageDataset::pixels(int64_t index, ImageScratch& scratch, int64_t* label) const {
  int64_t row = index_[index];
  *label = block_.labels[row];
  int64_t stride = block_.channels * block_.height * block_.width;
  return fit(block_.pixels.data() + row * stride, block_.height, block_.width, scratch);
}

}  // namespace trainer::data
