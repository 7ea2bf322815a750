// Shared by the end-to-end checkpoint tests: a tiny deterministic GPT config and metrics readers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace trainer::test {

// A tiny GPT on synthetic tokens with dropout, deterministic, so model, optimizer, loader and RNG
// state all matter. `checkpoint` is the config's checkpoint section ("" = the defaults).
inline std::string tiny_config(const std::string& name, int64_t max_steps,
                               const std::string& checkpoint = "checkpoint: {every_steps: 4, keep_last: 10}\n") {
  return "run: {name: " + name + ", out_dir: runs, seed: 3, deterministic: true}\n"
         "model: {arch: gpt, vocab_size: 64, block_size: 16, n_layer: 2, n_head: 2, n_embd: 32, dropout: 0.1}\n"
         "data: {format: synthetic, workers: 1, synthetic: {num_samples: 96, val_samples: 32}}\n"
         "train: {batch_size: 8, max_steps: " + std::to_string(max_steps) + ", log_every: 1, threads: 1}\n"
         "optim: {name: adamw, lr: 0.003, weight_decay: 0.1}\n"
         "log: {progress: off}\n" + checkpoint;
}

// The records of one kind in a metrics.jsonl; lines that do not parse (torn by a kill) are skipped.
inline std::vector<nlohmann::json> records(const std::filesystem::path& metrics, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("kind", "") == kind) out.push_back(j);
  }
  return out;
}

// Train losses by step (a later record of the same step wins).
inline std::map<int64_t, double> train_losses(const std::filesystem::path& metrics) {
  std::map<int64_t, double> out;
  for (const auto& j : records(metrics, "train")) out[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  return out;
}

}  // namespace trainer::test
