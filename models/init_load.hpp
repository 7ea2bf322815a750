// model.init: the weights a run starts from. Reads a safetensors file or a torch.save'd state_dict
// (.pt / .pth: the zip format, read by io/torch_pickle.cpp, no Python), maps the file's names onto the
// model's (rename, skip), and says exactly what it did in an InitReport.
#pragma once

#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"

namespace trainer::models {

// Every message starts with the file's path.
class InitLoadError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A state_dict read from a file, in the file's order. `format`: "safetensors" | "torch.save".
struct StateFile {
  std::string path, format;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // CPU tensors
};

// Tells the format by content (zip magic: torch.save, else safetensors). A legacy (non-zip) torch.save
// file, a TorchScript archive, a pickle that is not a dict of tensors, a truncated or corrupt file:
// InitLoadError naming the file and what it is.
StateFile read_state_file(const std::string& path);

struct InitReport {
  std::string path, format;
  std::vector<std::string> loaded;                            // model names, as loaded
  std::vector<std::string> skipped;                           // file names matched by model.init.skip
  std::vector<std::pair<std::string, std::string>> renamed;   // file name -> model name
  std::vector<std::string> reinitialised;                     // "name: file [a, b], model [c, d]"
  std::vector<std::string> missing;                           // model names the file does not give
  std::vector<std::string> unexpected;                        // file names the model does not have
  std::vector<std::string> converted;                         // "name (float16 -> float32)": dtype converted
};

// Copies the file's tensors into `m` as `init` says (device and memory format kept; a dtype converted
// only as io::weight_copy_problem allows: fp16/bf16 <-> fp32 yes, complex or bool into float never). Mis-shaped tensors are an error unless init.reinit_mismatched (then the
// model's own initialisation stays); a dtype that cannot be converted faithfully is always an error;
// missing and unexpected names are errors when init.strict. All
// problems are listed in one InitLoadError; nothing is copied then.
InitReport load_init_weights(torch::nn::Module& m, const config::InitConfig& init, const StateFile& file);
InitReport load_init_weights(torch::nn::Module& m, const config::InitConfig& init, const std::string& path);

// "a, b, c, ... and 12 more": at most `limit` names, for logs and messages.
std::string name_list(const std::vector<std::string>& names, size_t limit = 12);

}  // namespace trainer::models
