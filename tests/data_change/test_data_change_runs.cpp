// Data files that change under a running `trainer run` (issue 31): a text file, llm.c and nanoGPT
// token shards, IDX and CIFAR files are truncated, deleted or replaced while the run trains on them.
// Every case ends with exit 65 naming the file and what happened to it, after a checkpoint at the
// last completed step, or, under data.on_change: reload, reopens the data and trains on. Never a
// signal (a SIGBUS was exit 135). Each run waits for a metrics record past step 3 before the change.
#include <catch2/catch.hpp>
#include <signal.h>

#include <filesystem>
#include <functional>
#include <random>
#include <regex>

#include "ckpt/ckpt_runs.hpp"
#include "data/fixtures.hpp"
#include "ckpt/hardening_util.hpp"
#include "test_util.hpp"


using namespace trainer::test;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
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

std::string random_bytes(size_t n, unsigned seed, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, hi);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(pick(rng));
  return s;
}

std::string llmc_shard(const std::string& tokens) {  // llm.c: 256 int32 header, then uint16 tokens
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size() / 2);
  return std::string(reinterpret_cast<const char*>(header.data()), 1024) + tokens;
}

std::string uint16_tokens(size_t n, unsigned seed) {  // tokens < 64, little-endian uint16
  std::string s = random_bytes(2 * n, seed, 63);
  for (size_t i = 1; i < s.size(); i += 2) s[i] = 0;
  return s;
}

std::vector<int> cycling_labels(int variant) {
  std::vector<int> labels(112 + 48 * variant);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int>(i % 10);
  return labels;
}

const char* kGpt = "model: {arch: gpt, vocab_size: 256, block_size: 16, n_layer: 1, n_head: 2, n_embd: 32}\n";
const char* kResnet1 = "model: {arch: resnet, depth: 8, width: 0.25, in_channels: 1, num_classes: 10}\n";
const char* kResnet3 = "model: {arch: resnet, depth: 8, width: 0.25, in_channels: 3, num_classes: 10}\n";

// About 14 steps of 8 per epoch, so an epoch boundary (where a deleted or replaced file is found)
// comes soon after the change; variant 1 is larger (a reload sees another sample count).
DataSet data_set(const std::string& format, const fs::path& dir) {
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

std::string config_for(const DataSet& d, const std::string& on_change) {
  const std::string md = std::regex_replace(d.model_and_data, std::regex("\\$\\{ON_CHANGE\\}"), on_change);
  return "run: {name: exp, seed: 1}\n" + md +
         "train: {batch_size: 8, max_steps: 10000000, log_every: 1, eval_every: 0, device: cpu, threads: 1}\n"
         "optim: {name: adamw, lr: 0.001}\n"
         "log: {progress: off}\n";
}

void apply(Change c, const DataSet& d) {
  if (c == Change::Truncate) fs::resize_file(d.file, static_cast<uintmax_t>(d.truncated_size));
  if (c == Change::Delete) fs::remove(d.file);
  if (c == Change::Replace) {  // as a job rewriting the data does: new files renamed over the old ones
    const fs::path fresh = d.folder.parent_path() / "fresh";
    fs::create_directories(fresh);
    d.write(1, fresh);
    for (const auto& e : fs::directory_iterator(fresh)) fs::rename(e.path(), d.folder / e.path().filename());
  }
}

std::string what_of(Change c, const DataSet& d, int64_t size_before) {
  if (c == Change::Delete) return "it was deleted";
  if (c == Change::Replace) return "it was replaced by another file";
  return "it was truncated from " + std::to_string(size_before) + " to " + std::to_string(d.truncated_size) + " bytes";
}

int64_t last_train_step(const fs::path& metrics) {
  if (!fs::exists(metrics)) return -1;
  auto r = records(metrics, "train");
  return r.empty() ? -1 : r.back().at("step").get<int64_t>();
}

// A run in the background that is killed when the test leaves before it ended (a failed check).
struct BackgroundRun {
  fs::path dir;
  BackgroundRun(const fs::path& d, const std::string& config) : dir(d) {
    write_file(dir / "exp.yaml", config);
    start_trainer("run " + (dir / "exp.yaml").string() + " --out-dir " + (dir / "runs").string(), dir / "run.log",
                  dir / "run.rc");
  }
  ~BackgroundRun() {
    if (read_file(dir / "run.rc").empty())
      if (const pid_t p = lock_holder(dir / "runs/exp/.lock"); p > 0) ::kill(p, SIGKILL);
  }
  fs::path metrics() const { return dir / "runs/exp/metrics.jsonl"; }
  std::string log() const { return read_file(dir / "run.log"); }
  bool past_step(int64_t n) const { return last_train_step(metrics()) > n; }
};

// `change` while the run trains on `format` (data.on_change: error): exit 65 naming the file and what
// happened, a checkpoint at the last completed step, no signal.
void check_error_exit(const std::string& format, Change change, const std::string& tag) {
  auto dir = scratch_dir("data_change_" + format + "_" + tag);
  const DataSet d = data_set(format, dir);
  d.write(0, d.folder);
  const int64_t size_before = static_cast<int64_t>(fs::file_size(d.file));
  BackgroundRun run(dir, config_for(d, "error"));
  REQUIRE(wait_for([&] { return run.past_step(3); }, 180));
  apply(change, d);
  const int rc = wait_rc(dir / "run.rc", 180);
  const std::string log = run.log();
  INFO(format << " " << tag << ":\n" << log);
  CHECK(rc == 65);
  CHECK(contains(log, d.file.string() + ": the data file changed while the run was using it: " +
                          what_of(change, d, size_before)));
  std::smatch m;
  REQUIRE(std::regex_search(log, m, std::regex("saved a checkpoint at step (\\d+); exiting with code 65")));
  const int64_t saved = std::stoll(m[1].str());
  CHECK(saved > 3);
  CHECK(saved == last_train_step(run.metrics()));  // the last completed step, every one of them logged
  CHECK(fs::exists(dir / ("runs/exp/checkpoints/step-" + std::to_string(saved)) / "manifest.json"));
}

}  // namespace

TEST_CASE("data change: a text file truncated to 0 bytes under a run ends it with exit 65 and a checkpoint",
          "[e2e]") {
  check_error_exit("text", Change::Truncate, "truncate");
}

TEST_CASE("data change: text deleted or replaced under a run: exit 65, a checkpoint, the file named", "[e2e]") {
  check_error_exit("text", Change::Delete, "delete");
  check_error_exit("text", Change::Replace, "replace");
}

TEST_CASE("data change: llm.c and nanoGPT shards truncated, deleted or replaced: exit 65 and a checkpoint",
          "[e2e]") {
  for (const char* format : {"llmc", "nanogpt"}) {
    check_error_exit(format, Change::Truncate, "truncate");
    check_error_exit(format, Change::Delete, "delete");
    check_error_exit(format, Change::Replace, "replace");
  }
}

TEST_CASE("data change: IDX and CIFAR files truncated, deleted or replaced: exit 65 and a checkpoint",
          "[e2e]") {
  for (const char* format : {"idx", "cifar"}) {
    check_error_exit(format, Change::Truncate, "truncate");
    check_error_exit(format, Change::Delete, "delete");
    check_error_exit(format, Change::Replace, "replace");
  }
}

namespace {

// data.on_change: reload: the run reopens the changed data, logs it, and trains on (stopped by
// SIGTERM once it is 3 steps past the reload: exit 75). `change` must leave usable data.
void check_reload(const std::string& format, Change change, const std::string& tag, int64_t samples_after) {
  auto dir = scratch_dir("data_reload_" + format + "_" + tag);
  DataSet d = data_set(format, dir);
  d.write(0, d.folder);
  if (change == Change::Truncate) d.truncated_size = static_cast<int64_t>(fs::file_size(d.file)) / 2;
  BackgroundRun run(dir, config_for(d, "reload"));
  REQUIRE(wait_for([&] { return run.past_step(3); }, 180));
  apply(change, d);
  std::smatch m;
  const std::regex reloaded("data.on_change: reload: reopened the data \\(([^\\n]*), was (\\d+) samples\\); training "
                            "goes on at step (\\d+)");
  REQUIRE(wait_for([&] { return std::regex_search(run.log(), reloaded); }, 180));
  const std::string at_reload = run.log();
  REQUIRE(std::regex_search(at_reload, m, reloaded));
  const int64_t step = std::stoll(m[3].str());
  INFO(format << " " << tag << ":\n" << at_reload);
  CHECK(contains(m[1].str(), std::to_string(samples_after) + (format == "text" || format == "llmc" ||
                                                                       format == "nanogpt" ? " windows" : " images")));
  CHECK(contains(at_reload, d.file.string() + ": the data file changed while the run was using it: "));
  REQUIRE(wait_for([&] { return run.past_step(step + 3); }, 180));
  REQUIRE(::kill(lock_holder(dir / "runs/exp/.lock"), SIGTERM) == 0);
  CHECK(wait_rc(dir / "run.rc", 180) == 75);
}

}  // namespace

TEST_CASE("data change: under on_change reload a replaced or truncated text file is reopened and training goes on",
          "[e2e]") {
  // text: 2800 bytes, 10% validation: (2520 - 1) / 16 = 157 windows; halved: (900 - 1) / 16 = 56
  check_reload("text", Change::Replace, "replace", 157);
  check_reload("text", Change::Truncate, "truncate", 56);
}

TEST_CASE("data change: under on_change reload replaced shards, IDX and CIFAR files are reopened", "[e2e]") {
  check_reload("llmc", Change::Replace, "replace", 157);     // 2800 tokens, 10% validation
  check_reload("nanogpt", Change::Replace, "replace", 157);
  check_reload("idx", Change::Replace, "replace", 160);
  check_reload("cifar", Change::Replace, "replace", 160);
}

TEST_CASE("data change: under on_change reload a deleted file cannot be reopened: exit 65 and a checkpoint", "[e2e]") {
  auto dir = scratch_dir("data_reload_deleted");
  const DataSet d = data_set("nanogpt", dir);
  d.write(0, d.folder);
  BackgroundRun run(dir, config_for(d, "reload"));
  REQUIRE(wait_for([&] { return run.past_step(3); }, 180));
  apply(Change::Delete, d);
  CHECK(wait_rc(dir / "run.rc", 180) == 65);
  const std::string log = run.log();
  INFO(log);
  CHECK(contains(log, "data.on_change: reload: the changed data cannot be reopened: " + d.file.string()));
  std::smatch m;
  REQUIRE(std::regex_search(log, m, std::regex("saved a checkpoint at step (\\d+); exiting with code 65")));
  CHECK(fs::exists(dir / ("runs/exp/checkpoints/step-" + m[1].str()) / "manifest.json"));
}
