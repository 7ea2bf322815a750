// Image files for inference (`trainer predict`): decoded, resized and normalised by the same code
// and the same settings as the evaluation samples of the config's data (no augmentation), so a model
// sees a file as it saw the validation images.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/transforms.hpp"

namespace trainer::data {

struct ImageInputSpec {
  int64_t channels = 0, height = 0, width = 0;  // the model input the training data had
  int64_t resize = 0;  // the shorter side before the centred crop (data.val_resize); JPEG decoding may shrink to it
  Normalizer normalizer;                        // the training split's (statistics computed as a run does)
  std::vector<std::string> classes;             // image_folder: the class folder names; otherwise empty
  std::string data_describe;                    // the training data, for the log
};

// Opens the config's training data as a run does: the normalisation statistics (data.normalize
// without explicit mean/std) come from it, and image_folder gives the class names. Throws DataError.
ImageInputSpec image_input_spec(const config::DataConfig& data, const config::ModelConfig& model, int64_t seed);

// Files and folders -> image files: a file as given (whatever its name; decoding decides), a folder's
// *.jpg / *.jpeg / *.png at any depth, sorted. DataError for a path that does not exist or a folder
// without images; an image name in a folder that cannot be read (a dangling link) too, unless
// `skip_bad` (data.on_bad_sample: skip): then a warning names it.
std::vector<std::string> expand_image_inputs(const std::vector<std::string>& paths, bool skip_bad);

// The model input of `files`: (B, C, H, W) float. An image of another size is resized (shorter side)
// and centre-cropped as data.image_size does; a file that is not a readable JPEG or PNG, or that
// cannot be brought to a non-square input, is a DataError naming it.
torch::Tensor load_image_batch(const std::vector<std::string>& files, const ImageInputSpec& spec);

}  // namespace trainer::data
