// `trainer eval CONFIG --checkpoint PATH [--output FILE]`: the validation metrics of a checkpoint or
// an exported file, computed by the training run's own Evaluator (same loader, batches, precision and
// cross-rank merge), so they equal the eval record the run logged at that step. Under a launcher
// every rank scores its shard of the validation split and rank 0 prints.
#pragma once

#include <string>

#include "engine/commands/commands.hpp"

namespace trainer::engine {

struct EvalArgs : ConfigArgs {
  std::string checkpoint;  // a step folder, a checkpoints folder / run directory, or a .safetensors file
  std::string output;      // the JSON record into this file instead of stdout ("" = stdout)
};

// Prints one human line (stdout) and one JSON record (stdout, or --output); returns the exit code.
int cmd_eval(const EvalArgs& args);

}  // namespace trainer::engine
