// One function per data.format, each returning its train and val datasets. create_datasets()
// (dataset.cpp) picks one and does the checks against the model that are common to all.
#pragma once

#include "data/dataset.hpp"
#include "data/image_dataset.hpp"

namespace trainer::data {

DatasetPair open_idx(const config::DataConfig& data, const ImageOptions& opts, int64_t classes);
DatasetPair open_cifar(const config::DataConfig& data, const ImageOptions& opts);
DatasetPair open_image_folder(const config::DataConfig& data, const ImageOptions& opts, int64_t channels);
DatasetPair open_synthetic_images(const config::DataConfig& data, const ImageOptions& opts, int64_t channels,
                                  int64_t classes);

DatasetPair open_text(const config::DataConfig& data, int64_t block_size);
DatasetPair open_tokens(const config::DataConfig& data, int64_t block_size, int64_t vocab_size);
DatasetPair open_synthetic_tokens(const config::DataConfig& data, int64_t block_size, int64_t vocab_size,
                                  int64_t seed);

}  // namespace trainer::data
