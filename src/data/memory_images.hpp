// Images held in memory as one (N, C, H, W) uint8 block with int64 labels: the decoded form of
// IDX and CIFAR files, which are small enough to keep whole.
#pragma once

#include <string>
#include <vector>

#include "data/file_watch.hpp"
#include "data/image_dataset.hpp"

namespace trainer::data {

struct ImageBlock {
  std::string source;  // the file(s) the images came from, for messages
  std::string label_source;
  int64_t count = 0, channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // (N, C, H, W)
  std::vector<int64_t> labels;  // (N)
  // The files read, stamped when read: held in memory, so a change cannot fault a read, but the
  // loader's epoch-boundary check still ends (or reloads) a run whose files changed.
  std::vector<std::pair<std::string, FileStamp>> files;
};

class MemoryImageDataset : public ImageDataset {
 public:
  // Labels outside [0, classes) are a DataError naming the label file and sample, or with
  // skip_bad, samples left out (counted and logged).
  MemoryImageDataset(std::string format, ImageBlock block, int64_t classes, ImageOptions opts);
  int64_t size() const override { return static_cast<int64_t>(index_.size()); }
  std::string describe() const override;
  void check_unchanged() const override;

 protected:
  const uint8_t* pixels(int64_t index, ImageScratch& scratch, int64_t* label) const override;

 private:
  std::string format_;
  ImageBlock block_;
  std::vector<int64_t> index_;  // dataset index -> block row (identity unless bad labels were skipped)
};

}  // namespace trainer::data
