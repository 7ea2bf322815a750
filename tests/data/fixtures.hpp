// Small data files written by the tests themselves (no data is committed): IDX, CIFAR, token
// shards, image folders. Pixel values are a known function of (sample, channel, y, x).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/image_decode.hpp"
#include "data/prepare_text.hpp"
#include "test_util.hpp"

namespace trainer::test {

// A data section reading `path` as `format` alone: no normalisation, no validation split (the
// reader tests look at exactly what the file holds).
inline config::DataConfig plain_data_cfg(const std::string& format, const std::filesystem::path& path) {
  config::DataConfig d;
  d.format = config::parse_enum<config::DataFormat>(format, "data.format");
  d.path = path.string();
  d.normalize.mode = config::NormalizeMode::None;
  d.val_fraction = 0;
  return d;
}

namespace fs = std::filesystem;

// Model configs the readers check their data against.
inline config::ModelConfig resnet(int64_t channels, int64_t classes) {
  config::ModelConfig m;
  m.arch = "resnet";
  m.in_channels = channels;
  m.num_classes = classes;
  return m;
}

inline config::ModelConfig gpt(int64_t block, int64_t vocab = 256) {
  config::ModelConfig m;
  m.arch = "gpt";
  m.block_size = block;
  m.vocab_size = vocab;
  return m;
}

inline uint8_t pixel_value(int64_t i, int64_t c, int64_t y, int64_t x) {
  return static_cast<uint8_t>((i * 37 + c * 101 + y * 13 + x * 7) % 256);
}

inline std::string be32(uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 255), char((v >> 8) & 255), char(v & 255)};
}

inline void write_maybe_gz(const fs::path& p, const std::string& bytes, bool gz) {
  if (!gz) return write_file(p, bytes);
  gzFile f = gzopen(p.string().c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

// PREFIX-images-idx3-ubyte[.gz] + PREFIX-labels-idx1-ubyte[.gz]; label of sample i = labels[i].
inline void write_idx(const fs::path& dir, const std::string& prefix, const std::vector<int>& labels, int64_t h,
                      int64_t w, bool gz) {
  std::string img = be32(0x803) + be32(labels.size()) + be32(h) + be32(w);
  for (size_t i = 0; i < labels.size(); ++i)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) img += char(pixel_value(i, 0, y, x));
  std::string lab = be32(0x801) + be32(labels.size());
  for (int l : labels) lab += char(l);
  std::string ext = gz ? ".gz" : "";
  write_maybe_gz(dir / (prefix + "-images-idx3-ubyte" + ext), img, gz);
  write_maybe_gz(dir / (prefix + "-labels-idx1-ubyte" + ext), lab, gz);
}

// CIFAR-10 (one label byte) or CIFAR-100 (coarse = label / 5, fine = label) records.
inline void write_cifar(const fs::path& file, const std::vector<int>& labels, bool hundred) {
  std::string out;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (hundred) out += char(labels[i] / 5);
    out += char(labels[i]);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) out += char(pixel_value(i, c, y, x));
  }
  write_file(file, out);
}

inline void write_nanogpt(const fs::path& file, const std::vector<uint16_t>& tokens) {
  write_file(file, std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
}

// Interleaved (H, W, C) pixels of image i.
inline std::vector<uint8_t> interleaved_image(int64_t i, int64_t h, int64_t w, int64_t c) {
  std::vector<uint8_t> px(h * w * c);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) px[(y * w + x) * c + k] = pixel_value(i, k, y, x);
  return px;
}

// root/<class>/img_<k>.{png|jpg}: `per_class` images of h x w x 3 per class.
inline void write_image_folder(const fs::path& root, const std::vector<std::string>& classes, int per_class,
                               int64_t h, int64_t w, bool png) {
  int64_t i = 0;
  for (const auto& cls : classes) {
    fs::create_directories(root / cls);
    for (int k = 0; k < per_class; ++k, ++i) {
      auto px = interleaved_image(i, h, w, 3);
      auto p = root / cls / ("img_" + std::to_string(k) + (png ? ".png" : ".jpg"));
      if (png) data::write_png(p.string(), px.data(), h, w, 3);
      else data::write_jpeg(p.string(), px.data(), h, w, 3, 95);
    }
  }
}

}  // namespace trainer::test
