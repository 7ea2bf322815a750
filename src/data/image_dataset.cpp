#include "data/image_dataset.hpp"

#include <spdlog/spdlog.h>

#include <cstring>
#include <utility>

namespace trainer::data {

ImageDataset::ImageDataset(ImageOptions opts, int64_t channels, int64_t height, int64_t width, int64_t classes)
    : opts_(std::move(opts)), channels_(channels), height_(height), width_(width), classes_(classes) {}

const uint8_t* ImageDataset::fit(const uint8_t* src, int64_t src_h, int64_t src_w, ImageScratch& s,
                                 const ScaledDecode& scaled) const {
  const int64_t short_side = opts_.resize > 0 ? opts_.resize : height_;
  if (src_h == height_ && src_w == width_ && short_side == height_ && scaled.scale == 1) return src;
  uint8_t* out = output(s, s.resized);
  resize_short_center_crop(src, channels_, src_h, src_w, out, short_side, height_, s.filter, scaled);
  return out;
}

const uint8_t* ImageDataset::source(int64_t index, ImageScratch& scratch, int64_t* label, int64_t* h,
                                    int64_t* w) const {
  *h = height_;
  *w = width_;
  return pixels(index, scratch, label);
}

const uint8_t* ImageDataset::resized_crop_of(int64_t index, ImageScratch& s, int64_t* label,
                                             const std::function<CropBox(int64_t, int64_t)>& choose) const {
  int64_t h = 0, w = 0;
  uint8_t* const slot = std::exchange(s.out, nullptr);  // the source (fit() to the output size) stays in scratch
  const uint8_t* full = source(index, s, label, &h, &w);
  s.out = slot;
  if (!full) return nullptr;
  const CropBox box = choose(h, w);
  uint8_t* out = output(s, s.cropped);
  resized_crop(full, channels_, h, w, box, out, height_, width_, s.tmp, s.filter);
  return out;
}

uint8_t* ImageDataset::output(ImageScratch& s, std::vector<uint8_t>& fallback) const {
  if (s.out) return s.out;
  fallback.resize(channels_ * height_ * width_);
  return fallback.data();
}

// Training samples: RandomResizedCrop (of the source), then pad-crop / flip / rotation, then colour
// jitter; each transform draws from its own stream, so turning one on leaves the others' draws.
bool ImageDataset::fill(int64_t index, int64_t epoch, bool augment, void* input, int64_t* target) const {
  thread_local ImageScratch scratch;
  const auto& aug = opts_.augment;
  auto* dst = static_cast<uint8_t*>(input);
  const bool moved_after = augment && augment_enabled(aug);  // pad-crop / flip / rotation copy src into dst
  scratch.out = moved_after ? nullptr : dst;                  // else a resize writes into the slot itself
  const uint8_t* src = nullptr;
  if (augment && aug.random_resized_crop) {
    SampleRng rng = make_rng(RngStream::ResizedCrop, opts_.seed, epoch, index);
    src = resized_crop_of(index, scratch, target, [&](int64_t h, int64_t w) {
      return sample_resized_crop(h, w, aug.rrc_scale, aug.rrc_ratio, rng);
    });
    if (!src) return false;
  } else {
    src = pixels(index, scratch, target);
    if (!src) return false;
  }
  if (moved_after) {
    const AugmentChoice choice = augment_choice(aug, opts_.seed, epoch, index);
    apply_augment(src, channels_, height_, width_, aug.crop_padding, choice, dst);
  } else if (src != dst) {  // pixels at the output size already (a memory block, a decode at that size)
    std::memcpy(dst, src, channels_ * height_ * width_);
  }
  if (augment && jitter_enabled(aug)) {
    SampleRng rng = make_rng(RngStream::ColorJitter, opts_.seed, epoch, index);
    apply_jitter(dst, channels_, height_ * width_, aug, sample_jitter(aug, rng));
  }
  return true;
}

torch::Tensor ImageDataset::finish(const torch::Tensor& raw, bool pin) const {
  // pinned: torch's caching host allocator keeps them; else this dataset's pool (data/buffer_pool.hpp)
  auto out = pin ? torch::empty(raw.sizes(), host_options(torch::kFloat32, pin))
                 : batch_pool_.empty(raw.sizes().vec(), torch::kFloat32);  // (B, C, H, W)
  normalizer_.apply(raw.data_ptr<uint8_t>(), out.data_ptr<float>(), raw.size(0), channels_, height_ * width_);
  return out;
}

torch::Tensor ImageDataset::finish_tensor(const torch::Tensor& raw, bool channels_last) const {
  torch::Tensor table;  // (C * 256) float: finish()'s values, looked up rather than recomputed
  {
    std::lock_guard<std::mutex> lock(tables_mu_);
    auto& t = tables_[raw.device().str()];
    if (!t.defined()) t = torch::tensor(normalizer_.table(channels_)).to(raw.device());
    table = t;
  }
  // int32 indices through index_select (take wants int64: twice the bytes, and on a GPU each copy
  // stream keeps its own cached block of them)
  const auto offsets = torch::arange(channels_, raw.options().dtype(torch::kInt)) * 256;  // (C): each channel's row
  auto lookup = [&](const torch::Tensor& index) { return table.index_select(0, index.view(-1)).view(index.sizes()); };
  if (channels_last) {  // the lookup in (B, H, W, C) order: its result seen as (B, C, H, W) is channels-last
    auto index = raw.permute({0, 2, 3, 1}).to(torch::kInt, false, false, at::MemoryFormat::Contiguous);  // (B, H, W, C)
    return lookup(index.add_(offsets)).permute({0, 3, 1, 2});
  }
  auto index = raw.to(torch::kInt, false, false, at::MemoryFormat::Contiguous);  // (B, C, H, W)
  return lookup(index.add_(offsets.view({1, channels_, 1, 1})));
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
