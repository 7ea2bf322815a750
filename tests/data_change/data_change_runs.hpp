// Shared by the data-change runs (tests/data_change): data sets of each format that a test writes,
// changes (truncate, delete, replace) while a run trains on them, and the run in the background.
#pragma once

#include <signal.h>

#include <filesystem>
#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "ckpt/ckpt_runs.hpp"
#include "ckpt/hardening_util.hpp"
#include "data/fixtures.hpp"
#include "test_util.hpp"

namespace trainer::test::data_change {

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

enum class Change { Truncate, Delete, Replace };

// One data set: its folder, the config's model and data sections, and the file that changes.
struct DataSet {
  std::string name;
  std::string model_and_data;  // YAML lines for model: and data:
  fs::path folder, file;       // the data's folder; the file a change hits
  // writes the data set's files into a folder; the variant (0, 1) sets their content and size
  std::function<void(int, const fs::path&)> write;
  int64_t truncated_size = 0;  // what Change::Truncate leaves (0, or the format's header)
};

inline std::string random_bytes(size_t n, unsigned seed, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, hi);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(pick(rng));
  return s;
}

inline std::string llmc_shard(const std::string& tokens) {  // llm.c: 256 int32 header, then uint16 tokens
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size() / 2);
  return std::string(reinterpret_cast<const char*>(header.data()), 1024) + tokens;
}

inline std::string uint16_tokens(size_t n, unsigned seed) {  // tokens < 64, little-endian uint16
  std::string s = random_bytes(2 * n, seed, 63);
  for (size_t i = 1; i < s.size(); i += 2) s[i] = 0;
  return s;
}

inline std::vector<int> cycling_labels(int variant) {
  std::vector<int> labels(112 + 48 * variant);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int>(i % 10);
  return labels;
}

inline const char* kGpt = "model: {arch: gpt, vocab_size: 256, block_size: 16, n_layer: 1, n_head: 2, n_embd: 32}\n";
inline const char* kResnet1 = "model: {arch: resnet, depth: 8, width: 0.25, in_channels: 1, num_classes: 10}\n";
inline const char* kResnet3 = "model: {arch: resnet, depth: 8, width: 0.25, in_channels: 3, num_classes: 10}\n";

// About 14 steps of 8 per epoch, so an epoch boundary (where a deleted or replaced file is found)
// comes soon after the change; variant 1 is larger (a reload sees another sample count).
inline DataSet data_set(const std::string& format, const fs::path& dir) {
  DataSet d;
  d.name = format;
  d.folder = dir / "data";
  const std::string tail = ", workers: 1, on_change: ${ON_CHANGE}}\n";
  if (format == "text") {
    d.file = d.folder / "corpus.txt";
    d.write = [](int v, const fs::path& to) { write_file(to / "corpus.txt", random_bytes(2000 + 800 * v, 7 + v, 255)); };
    d.model_and_data = std::string(kGpt) + "data: {format: text, path: " + d.file.string() + tail;
  } else if (format == "llmc" || format == "nanogpt") {
    const bool llmc = format == "llmc";
    d.file = d.folder / "train_000.bin";
    d.write = [llmc](int v, const fs::path& to) {
      const std::string t = uint16_tokens(2000 + 800 * v, 11 + v);
      write_file(to / "train_000.bin", llmc ? llmc_shard(t) : t);
    };
    d.truncated_size = llmc ? 1024 : 0;
    d.model_and_data = std::string(kGpt) + "data: {format: tokens, path: " + d.file.string() + tail;
  } else if (format == "idx") {
    d.file = d.folder / "train-images-idx3-ubyte";
    d.write = [](int v, const fs::path& to) { write_idx(to, "train", cycling_labels(v), 16, 16, /*gz=*/false); };
    d.truncated_size = 16;  // the header alone
    d.model_and_data = std::string(kResnet1) + "data: {format: idx, path: " + d.folder.string() + tail;
  } else {
    d.file = d.folder / "data_batch_1.bin";
    d.write = [](int v, const fs::path& to) { write_cifar(to / "data_batch_1.bin", cycling_labels(v), false); };
    d.model_and_data = std::string(kResnet3) + "data: {format: cifar, path: " + d.folder.string() + tail;
  }
  return d;
}

inline std::string config_for(const DataSet& d, const std::string& on_change) {
  const std::string md = std::regex_replace(d.model_and_data, std::regex("\\$\\{ON_CHANGE\\}"), on_change);
  return "run: {name: exp, seed: 1}\n" + md +
         "train: {batch_size: 8, max_steps: 10000000, log_every: 1, eval_every: 0, device: cpu, threads: 1}\n"
         "optim: {name: adamw, lr: 0.001}\n"
         "log: {progress: off}\n";
}

inline void apply(Change c, const DataSet& d) {
  if (c == Change::Truncate) fs::resize_file(d.file, static_cast<uintmax_t>(d.truncated_size));
  if (c == Change::Delete) fs::remove(d.file);
  if (c == Change::Replace) {  // as a job rewriting the data does: new files renamed over the old ones
    const fs::path fresh = d.folder.parent_path() / "fresh";
    fs::create_directories(fresh);
    d.write(1, fresh);
    // d.file first: a run that looks between two renames (IDX: images, then labels) names d.file, as
    // it would after both (it looks at a set's files in the order they were opened, d.file first)
    fs::rename(fresh / d.file.filename(), d.file);
    for (const auto& e : fs::directory_iterator(fresh)) fs::rename(e.path(), d.folder / e.path().filename());
  }
}

inline std::string what_of(Change c, const DataSet& d, int64_t size_before) {
  if (c == Change::Delete) return "it was deleted";
  if (c == Change::Replace) return "it was replaced by another file";
  return "it was truncated from " + std::to_string(size_before) + " to " + std::to_string(d.truncated_size) + " bytes";
}

inline int64_t last_train_step(const fs::path& metrics) {
  if (!fs::exists(metrics)) return -1;
  auto r = records(metrics, "train");
  return r.empty() ? -1 : r.back().at("step").get<int64_t>();
}

// A run in the background that is killed when the test leaves before it ended (a failed check).
// `launch`: "launch -n 2 -- " for a run of several ranks (rank 0 holds the lock: killing it ends the
// launch); `env`: variables for the command.
struct BackgroundRun {
  fs::path dir;
  BackgroundRun(const fs::path& d, const std::string& config, const std::string& launch = "",
                const std::string& env = "")
      : dir(d) {
    write_file(dir / "exp.yaml", config);
    start_trainer(launch + "run " + (dir / "exp.yaml").string() + " --out-dir " + (dir / "runs").string(),
                  dir / "run.log", dir / "run.rc", env);
  }
  ~BackgroundRun() {
    if (read_file(dir / "run.rc").empty())
      if (const pid_t p = lock_holder(dir / "runs/exp/.lock"); p > 0) ::kill(p, SIGKILL);
  }
  fs::path metrics() const { return dir / "runs/exp/metrics.jsonl"; }
  std::string log() const { return read_file(dir / "run.log"); }
  bool past_step(int64_t n) const { return last_train_step(metrics()) > n; }
};

}  // namespace trainer::test::data_change
