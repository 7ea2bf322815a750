// `trainer run --resume auto | never | PATH`, parsed once where the command line is read.
#pragma once

#include <string>

namespace trainer::engine {

enum class ResumeMode {
  Auto,   // the newest checkpoint that verifies and restores; a fresh start when there is none (an
          // error when checkpoints exist but none can be used)
  Never,  // a fresh start
  Path,   // the checkpoint at `path` (a step folder, or a checkpoints folder / run directory: its newest)
};

struct ResumeOptions {
  ResumeMode mode = ResumeMode::Auto;
  std::string path;  // ResumeMode::Path only
};

// "auto" and "never" are the modes; any other text is a checkpoint path.
inline ResumeOptions parse_resume(const std::string& arg) {
  if (arg == "auto") return {ResumeMode::Auto, ""};
  if (arg == "never") return {ResumeMode::Never, ""};
  return {ResumeMode::Path, arg};
}

}  // namespace trainer::engine
