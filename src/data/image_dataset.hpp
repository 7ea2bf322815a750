// Shared machinery of the image readers (idx, cifar, image_folder, synthetic): resize to the
// output size, augmentation on bytes, normalisation once per batch. A reader only says where a
// sample's pixels and label come from.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "data/crop_jitter.hpp"
#include "data/buffer_pool.hpp"
#include "data/dataset.hpp"
#include "data/transforms.hpp"

namespace trainer::data {

struct ImageOptions {
  int64_t size = 0;  // output side (0 = the source size; sources must then all be the same size)
  int64_t resize = 0;      // the shorter side before the centred crop to `size` (0 = size)
  int64_t val_resize = 0;  // data.val_resize: `resize` of the validation split (validation_options)
  config::AugmentConfig augment;
  int64_t seed = 0;
  bool skip_bad = false;  // on_bad_sample: skip
};

// The validation split's options: no augmentation, data.val_resize before the centred crop.
inline ImageOptions validation_options(ImageOptions o) {
  o.augment = {};
  o.resize = o.val_resize;
  return o;
}

// Per-thread buffers, reused across samples so decoding and resizing do not allocate per sample.
struct ImageScratch {
  std::vector<uint8_t> decoded, resized, tmp, cropped;
  std::vector<float> filter;
  // Where a resize to the output size writes (fit, resized crops): the batch's slot when nothing
  // follows it there (no augmentation), so the pixels are not copied once more; nullptr: `resized` /
  // `cropped`. Set by fill() for each sample.
  uint8_t* out = nullptr;
};

class ImageDataset : public Dataset {
 public:
  ImageDataset(ImageOptions opts, int64_t channels, int64_t height, int64_t width, int64_t classes);

  SampleKind kind() const override { return SampleKind::Image; }
  std::vector<int64_t> sample_shape() const override { return {channels_, height_, width_}; }
  int64_t num_classes() const override { return classes_; }
  torch::ScalarType raw_dtype() const override { return torch::kUInt8; }
  std::vector<int64_t> target_shape() const override { return {}; }
  bool fill(int64_t index, int64_t epoch, bool augment, void* input, int64_t* target) const override;
  torch::Tensor finish(const torch::Tensor& raw, bool pin) const override;
  bool finishes_anywhere() const override { return true; }
  torch::Tensor finish_tensor(const torch::Tensor& raw, bool channels_last) const override;

  // Statistics of the un-augmented samples; at most `max_samples`, evenly spaced (0 = all).
  ChannelStats compute_stats(int64_t max_samples) const;
  void set_normalizer(Normalizer n) {
    normalizer_ = std::move(n);
    std::lock_guard<std::mutex> lock(tables_mu_);
    tables_.clear();
  }
  // Samples used for the statistics when data.normalize leaves them to be computed (0 = all).
  int64_t stats_samples() const { return stats_samples_; }
  const Normalizer& normalizer() const { return normalizer_; }
  const NormalizeValues* normalization() const override { return &normalizer_.values(); }

 protected:
  // Pointer to sample `index`'s (C, H, W) pixels at the output size, using `scratch` as needed, and
  // its label. nullptr when the sample is bad and skip_bad is set (the reader logs why).
  virtual const uint8_t* pixels(int64_t index, ImageScratch& scratch, int64_t* label) const = 0;
  // The image RandomResizedCrop cuts from, `*h` x `*w`: by default pixels() at the output size; a
  // reader whose sources are larger (image_folder) returns the decoded source. nullptr as pixels().
  virtual const uint8_t* source(int64_t index, ImageScratch& scratch, int64_t* label, int64_t* h, int64_t* w) const;
  // RandomResizedCrop of sample `index` into scratch.cropped at the output size, the box drawn by
  // `choose` from the source's size: by default source() cut and resized; a reader that can decode
  // only the box (image_folder) overrides it. nullptr as pixels().
  virtual const uint8_t* resized_crop_of(int64_t index, ImageScratch& scratch, int64_t* label,
                                         const std::function<CropBox(int64_t, int64_t)>& choose) const;
  // Where a resize to the output size writes: the slot (scratch.out), else `fallback` (one of scratch's).
  uint8_t* output(ImageScratch& scratch, std::vector<uint8_t>& fallback) const;
  // For readers whose sources are `src_h` x `src_w`: resizes to the output size when they differ.
  // `scaled`: src is a JPEG decoded at 1/scale of the whole image (its geometry is the whole's).
  const uint8_t* fit(const uint8_t* src, int64_t src_h, int64_t src_w, ImageScratch& scratch,
                     const ScaledDecode& scaled = {}) const;
  // Counts a skipped sample and warns (the first few times; then every 1000th).
  void note_skip(const std::string& what) const;

  ImageOptions opts_;
  int64_t channels_, height_, width_, classes_;
  Normalizer normalizer_;
  int64_t stats_samples_ = 0;
  mutable BufferPool batch_pool_;  // finish()'s float batches, reused
  mutable std::mutex tables_mu_;   // finish_tensor()'s lookup table, one copy per device
  mutable std::map<std::string, torch::Tensor> tables_;
};

}  // namespace trainer::data
