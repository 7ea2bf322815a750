// The state_dict inside a torch.save zip archive (PyTorch >= 1.6), read without Python.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "models/init_load.hpp"

namespace trainer::models {

// `bytes` is the whole file. Returns the dict's (name, tensor) entries in the file's order (CPU tensors).
// Throws InitLoadError naming `path` for a file that is not a torch.save'd dict of tensors: a damaged
// zip, a TorchScript archive, a pickled list or class, a nested checkpoint dict, a corrupt pickle.
std::vector<std::pair<std::string, torch::Tensor>> read_torch_state_dict(const std::string& path,
                                                                         const std::string& bytes);

}  // namespace trainer::models
