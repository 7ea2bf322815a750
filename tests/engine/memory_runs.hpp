// Shared by the batch_size auto tests (single rank and 2 ranks): a tiny GPT config with
// batch_size auto and a reader for the rows of `trainer check --memory`.
#pragma once

#include <filesystem>
#include <regex>
#include <string>

#include "test_util.hpp"

namespace trainer::test {

// `trainer check --memory` rows: the first column's value in bytes, by row name (a regex); -1 if absent.
inline double row_bytes(const std::string& out, const std::string& row) {
  std::smatch m;
  std::regex re("\\n  " + row + "[^\\n]*?([0-9.]+) (B|KiB|MiB|GiB) ");
  if (!std::regex_search(out, m, re)) return -1;
  const double v = std::stod(m[1].str());
  const std::string u = m[2].str();
  return v * (u == "B" ? 1 : u == "KiB" ? 1024.0 : u == "MiB" ? 1048576.0 : 1073741824.0);
}

// The first column (no checkpointing) of `trainer check CONFIG --memory`, in bytes.
struct CheckedMemory {
  std::string output;  // the whole check output (for INFO)
  int exit_code = -1;
  double parameters = -1, optimizer = -1, step_constant = -1, per_sample = -1;
  double held() const { return parameters + optimizer; }  // one rank: no DDP buckets
};
inline CheckedMemory check_memory(const std::string& config) {
  auto r = run_trainer("check " + config + " --memory");
  CheckedMemory m;
  m.output = r.output;
  m.exit_code = r.exit_code;
  m.parameters = row_bytes(r.output, "parameters");
  m.optimizer = row_bytes(r.output, "optimizer state \\(adamw\\)");
  m.step_constant = row_bytes(r.output, "step constant \\(measured\\)");
  m.per_sample = row_bytes(r.output, "activations per sample \\(measured\\)");
  return m;
}

// A 2-layer GPT on synthetic tokens, global batch 16, micro-batch auto; returns the file's path.
inline std::string auto_config(const std::filesystem::path& dir) {
  auto file = dir / "auto.yaml";
  write_file(file,
             "run: {name: auto, out_dir: runs, seed: 3, deterministic: true}\n"
             "model: {arch: gpt, vocab_size: 64, block_size: 32, n_layer: 2, n_head: 2, n_embd: 32}\n"
             "data: {format: synthetic, workers: 1, synthetic: {num_samples: 256, val_samples: 32}}\n"
             "train: {batch_size: auto, global_batch_size: 16, max_steps: 4, log_every: 1, threads: 1}\n"
             "optim: {name: adamw, lr: 0.003}\nlog: {progress: off}\ncheckpoint: {every_steps: 0}\n");
  return file.string();
}

}  // namespace trainer::test
