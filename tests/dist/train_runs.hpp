// End-to-end training runs of a tiny GPT on synthetic tokens under each launcher, and the losses
// rank 0 logged in metrics.jsonl, for the equivalence tests.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace trainer::test {

// Losses of runs that differ only in the order of floating-point sums agree to this.
inline constexpr double kLossTolerance = 1e-5;

// A 2-layer GPT on synthetic token windows; dropout 0 and deterministic kernels, so that the only
// differences between a 1-rank and a 2-rank run are the order of floating-point sums.
inline constexpr const char* kTinyGptYaml = R"(run:
  name: tiny
  seed: 3
  deterministic: true
model:
  arch: gpt
  vocab_size: 32
  block_size: 16
  n_layer: 2
  n_head: 2
  n_embd: 32
  dropout: 0.0
  bias: true
data:
  format: synthetic
  workers: 1
  synthetic:
    num_samples: 1024
    val_samples: 32
train:
  batch_size: 8
  max_steps: 20
  device: cpu
  threads: 1
  log_every: 1
optim:
  name: adamw
  lr: 0.003
  weight_decay: 0.0
dist:
  timeout_s: 60
log:
  progress: "off"
)";

struct TrainRun {
  int exit_code = -1;
  std::string output;
  std::vector<double> losses;  // rank 0's train records, step 1, 2, ...
  int64_t world_size = 0;      // from the summary record
  double seconds = 0;          // wall time of the whole command
};

inline std::filesystem::path write_tiny_gpt_config(const std::filesystem::path& dir) {
  auto path = dir / "tiny_gpt.yaml";
  write_file(path, kTinyGptYaml);
  return path;
}

// The train losses (in step order) and the world size of the run directory's metrics.jsonl.
inline void read_metrics(const std::filesystem::path& run_dir, TrainRun& run) {
  std::istringstream in(read_file(run_dir / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    if (j.at("kind") == "train") {
      if (j.at("step").get<int64_t>() != static_cast<int64_t>(run.losses.size()) + 1)
        throw std::runtime_error("metrics.jsonl: train records out of order at step " + j.at("step").dump());
      run.losses.push_back(j.at("loss").get<double>());
    } else if (j.at("kind") == "summary") {
      run.world_size = j.at("world_size").get<int64_t>();
    }
  }
}

// `prefix` is the launcher part of the command line (empty: a single process), `args` what follows
// `trainer`; the run writes under `out_dir`.
inline TrainRun train_tiny_gpt(const std::string& prefix, const std::string& args, const std::filesystem::path& out_dir) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_shell(prefix + (prefix.empty() ? "" : " ") + "\"" + TRAINER_BIN + "\" " + args + " --out-dir " +
                     out_dir.string());
  TrainRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.exit_code = r.exit_code;
  run.output = r.output;
  if (r.exit_code == 0) read_metrics(out_dir / "tiny", run);
  return run;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace trainer::test
