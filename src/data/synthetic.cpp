// synthetic: deterministic data from the seed, for benchmarks and smoke tests; learnable, so a
// short run shows the loss falling.
//   images: label = hash(seed, index) % classes; pixels are noise in [0, 128) plus 100 on the
//           horizontal band of rows that belongs to the label.
//   tokens: each window is an arithmetic sequence mod vocab with a per-sample start and step, so
//           the next token is predictable from the previous two.
#include <fmt/format.h>

#include <algorithm>

#include "data/readers.hpp"
#include "data/rng.hpp"

namespace trainer::data {
namespace {

constexpr int64_t kValIndexOffset = int64_t(1) << 40;  // val samples never equal train samples

class SyntheticImages : public ImageDataset {
 public:
  SyntheticImages(int64_t count, int64_t offset, ImageOptions opts, int64_t channels, int64_t side, int64_t classes)
      : ImageDataset(opts, channels, side, side, classes), count_(count), offset_(offset) {
    // normalisation statistics from at most 2^28 bytes of samples (at least 512 samples), spread over the
    // set: every one of 30 million took 24 s at start, deaf to a stop signal (found from outside; 1e9
    // is allowed). A set that small is taken whole, as before.
    stats_samples_ = std::max<int64_t>(512, (int64_t{1} << 28) / std::max<int64_t>(1, channels * side * side));
  }
  int64_t size() const override { return count_; }
  std::string describe() const override {
    return fmt::format("synthetic: {} images {}x{}x{}, {} classes", count_, channels_, height_, width_, classes_);
  }

 protected:
  const uint8_t* pixels(int64_t index, ImageScratch& s, int64_t* label) const override {
    SampleRng rng = make_rng(RngStream::Synthetic, opts_.seed, 0, index + offset_);
    *label = static_cast<int64_t>(rng.below(static_cast<uint64_t>(classes_)));
    s.decoded.resize(channels_ * height_ * width_);
    int64_t band_lo = *label * height_ / classes_, band_hi = (*label + 1) * height_ / classes_;
    for (int64_t c = 0; c < channels_; ++c)
      for (int64_t y = 0; y < height_; ++y)
        for (int64_t x = 0; x < width_; ++x) {
          uint8_t v = static_cast<uint8_t>(rng.next() & 127);
          if (y >= band_lo && y < std::max(band_hi, band_lo + 1)) v += 100;
          s.decoded[(c * height_ + y) * width_ + x] = v;
        }
    return s.decoded.data();
  }

 private:
  int64_t count_, offset_;
};

class SyntheticTokens : public Dataset {
 public:
  SyntheticTokens(int64_t count, int64_t offset, int64_t block, int64_t vocab, int64_t seed)
      : count_(count), offset_(offset), block_(block), vocab_(vocab), seed_(seed) {}
  int64_t size() const override { return count_; }
  SampleKind kind() const override { return SampleKind::Tokens; }
  std::vector<int64_t> sample_shape() const override { return {block_}; }
  int64_t num_classes() const override { return vocab_; }
  std::string describe() const override {
    return fmt::format("synthetic: {} token windows of {}+1, vocab {}", count_, block_, vocab_);
  }
  torch::ScalarType raw_dtype() const override { return torch::kInt64; }
  std::vector<int64_t> target_shape() const override { return {block_}; }
  bool fill(int64_t index, int64_t, bool, void* input, int64_t* target) const override {
    SampleRng rng = make_rng(RngStream::Synthetic, seed_, 0, index + offset_);
    int64_t start = static_cast<int64_t>(rng.below(vocab_)), step = 1 + static_cast<int64_t>(rng.below(7));
    auto* in = static_cast<int64_t*>(input);
    for (int64_t k = 0; k < block_; ++k) {
      in[k] = (start + k * step) % vocab_;
      target[k] = (start + (k + 1) * step) % vocab_;
    }
    return true;
  }
  torch::Tensor finish(const torch::Tensor& raw, bool pin) const override {
    return maybe_pinned(raw, pin);
  }

 private:
  int64_t count_, offset_, block_, vocab_, seed_;
};

}  // namespace

DatasetPair open_synthetic_images(const config::DataConfig& data, const ImageOptions& opts, int64_t channels,
                                  int64_t classes) {
  const auto& s = data.synthetic;
  DatasetPair pair;
  pair.train = std::make_shared<SyntheticImages>(s.num_samples, 0, opts, channels, s.image_size, classes);
  if (s.val_samples > 0) {
    const ImageOptions vo = validation_options(opts);
    pair.val = std::make_shared<SyntheticImages>(s.val_samples, kValIndexOffset, vo, channels, s.image_size, classes);
  }
  return pair;
}

DatasetPair open_synthetic_tokens(const config::DataConfig& data, int64_t block_size, int64_t vocab_size,
                                  int64_t seed) {
  const auto& s = data.synthetic;
  DatasetPair pair;
  pair.train = std::make_shared<SyntheticTokens>(s.num_samples, 0, block_size, vocab_size, seed);
  if (s.val_samples > 0)
    pair.val = std::make_shared<SyntheticTokens>(s.val_samples, kValIndexOffset, block_size, vocab_size, seed);
  return pair;
}

}  // namespace trainer::data
