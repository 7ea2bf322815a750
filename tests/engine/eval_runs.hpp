// Shared by the evaluation tests: a tiny ResNet on synthetic 12x12 images, one channel, 10 classes.
#pragma once

#include "config/config.hpp"

namespace trainer::test {

inline config::RunConfig tiny_resnet_eval_config(int64_t num_samples, int64_t val_samples, int64_t batch_size) {
  config::RunConfig cfg;
  cfg.model.arch = "resnet";
  cfg.model.depth = 8;
  cfg.model.width = 0.5;
  cfg.model.in_channels = 1;
  cfg.model.num_classes = 10;
  cfg.data.format = config::DataFormat::Synthetic;
  cfg.data.workers = 1;
  cfg.data.synthetic = {.num_samples = num_samples, .val_samples = val_samples, .image_size = 12};
  cfg.train.batch_size = batch_size;
  return cfg;
}

}  // namespace trainer::test
