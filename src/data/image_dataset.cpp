#include "data/image_dataset.hpp"

#include <spdlog/spdlog.h>

#include <cstring>

namespace trainer::data {

ImageDataset::ImageDataset(ImageOptions opts, int64_t channels, int64_t height, int64_t width, int64_t classes)
    : opts_(std::move(opts)), channels_(channels), height_(height), width_(width), classes_(classes) {}

const uint8_t* ImageDataset::fit(const uint8_t* src, int64_t src_h, int64_t src_w, ImageScratch& s) const {
  if (src_h == height_ && src_w == width_) return src;
  s.resized.resize(channels_ * height_ * width_);
  resize_short_center_crop(src, channels_, src_h, src_w, s.resized.data(), height_, s.tmp, s.filter);
  return s.resized.data();
}

bool ImageDataset::fill(int64_t index, int64_t epoch, bool augment, void* input, int64_t* target) const {
  thread_local ImageScratch scratch;
  const uint8_t* src = pixels(index, scratch, target);
  if (!src) return false;
  auto* dst = static_cast<uint8_t*>(input);
  if (augment && augment_enabled(opts_.augment)) {
    SampleRng rng = make_rng(RngStream::Augment, opts_.seed, epoch, index);
    apply_augment(src, channels_, height_, width_, opts_.augment.crop_padding, sample_augment(opts_.augment, rng), dst);
  } else {
    std::memcpy(dst, src, channels_ * height_ * width_);
  }
  return true;
}

torch::Tensor ImageDataset::finish(const torch::Tensor& raw, bool pin) const {
  auto out = torch::empty(raw.sizes(), host_options(torch::kFloat32, pin));  // (B, C, H, W)
  normalizer_.apply(raw.data_ptr<uint8_t>(), out.data_ptr<float>(), raw.size(0), channels_, height_ * width_);
  return out;
}

ChannelStats ImageDataset::compute_stats(int64_t max_samples) const {
  StatsAccumulator acc(channels_);
  ImageScratch scratch;
  int64_t n = size(), take = (max_samples > 0 && max_samples < n) ? max_samples : n;
  for (int64_t k = 0; k < take; ++k) {
    int64_t index = take == n ? k : k * n / take;
    int64_t label = 0;
    if (const uint8_t* p = pixels(index, scratch, &label)) acc.add(p, height_ * width_);
  }
  return acc.result();
}

void ImageDataset::note_skip(const std::string& what) const {
  int64_t n = ++skipped_;
  if (n <= 5 || n % 1000 == 0) spdlog::warn("skipping bad sample ({} skipped so far): {}", n, what);
}

}  // namespace trainer::data
