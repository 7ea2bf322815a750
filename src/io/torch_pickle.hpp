// The state_dict inside a torch.save zip archive (PyTorch >= 1.6), read without Python.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include <stdexcept>

namespace trainer::io {

// Every message starts with the file's path.
class TorchSaveError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `bytes` is the whole file. Returns the dict's (name, tensor) entries in the file's order (CPU tensors).
// Throws TorchSaveError naming `path` for a file that is not a torch.save'd dict of tensors: a damaged
// zip, a TorchScript archive, a pickled list or class, a nested checkpoint dict, a corrupt pickle.
std::vector<std::pair<std::string, torch::Tensor>> read_torch_state_dict(const std::string& path,
                                                                         const std::string& bytes);

}  // namespace trainer::io
