// `trainer export CHECKPOINT --out FILE.safetensors [--dtype fp32|bf16|fp16] [--ema]`: the model weights of a
// verified checkpoint under torchvision / nanoGPT names (the model's own parameter names), loadable
// with PyTorch's load_state_dict(strict=True), plus metadata: arch, model config (JSON), step, and
// `weights` (trained | ema). --ema writes the checkpoint's EMA weights (train.ema) instead.
#pragma once

#include <string>

namespace trainer::engine {

// Bad dtype or command line: std::invalid_argument. Bad checkpoint: io::CheckpointError. The
// checkpoint's weights are loaded into a model built from its own resolved config (strict), so a file
// that does not match its arch is refused instead of exported.
// `ema`: the EMA weights (ema.safetensors); a checkpoint without them is io::CheckpointError.
void export_checkpoint(const std::string& checkpoint, const std::string& out, const std::string& dtype,
                       bool ema = false);

// The subcommand: prints what it wrote or the error; returns the exit code (config/exit_codes.hpp).
int cmd_export(const std::string& checkpoint, const std::string& out, const std::string& dtype, bool ema = false);

}  // namespace trainer::engine
