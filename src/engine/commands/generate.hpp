// Autoregressive sampling from a causal language model: temperature, top-k, a seeded generator of its
// own (the output is a function of the weights, the prompt and the seed), the context cropped to the
// model's block size.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/optim/precision.hpp"
#include "models/model.hpp"

namespace trainer::engine {

struct SamplingOptions {
  int64_t max_new_tokens = 200;
  double temperature = 1.0;  // 0 = greedy (argmax); otherwise logits / temperature
  int64_t top_k = 0;         // sample among the k most likely tokens (0 = all)
  uint64_t seed = 0;
};

// One token from `logits` (V, float): the argmax when temperature is 0, else a draw from
// softmax(logits / temperature) restricted to the top_k largest logits, with `gen`.
int64_t sample_token(const torch::Tensor& logits, const SamplingOptions& opts, at::Generator& gen);

// `prompt` (token ids, not empty) followed by max_new_tokens sampled ones; each step feeds at most
// `block_size` trailing tokens. The model runs on `device` under `precision`'s autocast. `on_token`
// hears each new token as it is drawn (a caller streams them); returning false stops there.
std::vector<int64_t> generate_tokens(models::Model& model, std::vector<int64_t> prompt, int64_t block_size,
                                     const SamplingOptions& opts, const torch::Device& device, Precision precision,
                                     const std::function<bool(int64_t)>& on_token = {});

// Bytes written as they come, as text: whole UTF-8 characters at once (a character's first bytes
// wait for the rest), anything else as bytes_to_text writes it.
class Utf8Stream {
 public:
  explicit Utf8Stream(std::ostream& out) : out_(out) {}
  void put(int64_t token);  // writes what is complete and flushes
  void finish();            // writes a character left incomplete (as U+FFFD) and flushes

 private:
  std::ostream& out_;
  std::vector<int64_t> pending_;
};

// Bytes as text: well-formed UTF-8 kept; every byte that is not part of it, and every id that is not
// a byte (>= 256), written as U+FFFD.
std::string bytes_to_text(const std::vector<int64_t>& bytes);

}  // namespace trainer::engine
