// `trainer predict CONFIG --checkpoint PATH ...`: the trained model applied to new inputs.
//   image models: --input FILE|FOLDER... -> one JSON line per image, {"path", "top": [{"class",
//     "index", "prob"}, ...]}, decoded and normalised as the run's validation images were, batched;
//   GPT: --prompt TEXT or --prompt-file FILE -> the continuation, sampled (engine/commands/generate.hpp):
//     text for a byte-level model (data.format text), token ids otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/commands/commands.hpp"

namespace trainer::engine {

struct PredictArgs : ConfigArgs {
  std::string checkpoint;           // as trainer eval's
  std::string output;               // results into this file instead of stdout
  // images
  std::vector<std::string> inputs;  // image files and folders
  std::string labels;               // class names, one per line ("" = the image folder's, else indices)
  int64_t batch_size = 64;
  int64_t top_k = -1;               // images: classes listed (default 5); GPT: sampling's top-k (default 0 = all)
  // GPT
  std::string prompt, prompt_file;
  bool has_prompt = false;          // --prompt given (an empty prompt is allowed)
  int64_t max_new_tokens = 200;
  double temperature = 1.0;         // 0 = greedy
  uint64_t seed = 0;
  int64_t threads = 0;              // intra-op threads (0 = train.threads's rule)
};

int cmd_predict(const PredictArgs& args);

}  // namespace trainer::engine
