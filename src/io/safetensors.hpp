// Safetensors reader and writer (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON header, then the raw little-endian tensor bytes. Weights only: no
// pickle, no TorchScript. The reader validates the whole header before it reads any tensor data.
#pragma once

#include <torch/torch.h>

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trainer::io {

// Every message starts with the file's path.
class SafetensorsError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct SafetensorsFile {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // CPU tensors, in data-offset order
  std::map<std::string, std::string> metadata;                 // the header's __metadata__
  std::string path;                                            // where it was read from ("" if built in memory)
};

// The header-length limit: the same 100 MB the reference implementation uses.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// Writes CPU, contiguous copies of `tensors` atomically (temporary file, fsync, rename, fsync folder).
// Tensors are laid out by element size, largest first, so each one is naturally aligned, and the header
// is padded with spaces so the data starts at a multiple of 8 bytes (as the Python library does).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a file; throws SafetensorsError naming the file and the problem.
SafetensorsFile load_safetensors(const std::string& path);

// A module whose PyTorch state_dict holds one tensor under two names (nanoGPT ties lm_head.weight to
// transformer.wte.weight) says so here. LibTorch registers such a tensor once, so optimizers and
// gradient sync see it once; named_state() writes it under every name so PyTorch's
// load_state_dict(strict=True) accepts the file, and load_state_into() accepts any of the names.
class TiedState {
 public:
  virtual ~TiedState() = default;
  // (alias, registered name) pairs, e.g. {"lm_head.weight", "transformer.wte.weight"}
  virtual std::vector<std::pair<std::string, std::string>> tied_names() const = 0;
};

// Parameters and buffers under their PyTorch state_dict names (plus TiedState aliases).
std::vector<std::pair<std::string, torch::Tensor>> named_state(const torch::nn::Module& m);

// Copies the file's tensors into the module's parameters and buffers (dtype converted as PyTorch's
// load_state_dict does). A shape mismatch is always an error; with `strict`, so are missing and
// unexpected names. Every problem is listed, by name, in one SafetensorsError.
void load_state_into(torch::nn::Module& m, const SafetensorsFile& f, bool strict = true);

// "F32" for torch::kFloat etc.; throws std::invalid_argument for a dtype safetensors cannot hold here.
std::string safetensors_dtype_name(torch::ScalarType t);

}  // namespace trainer::io
