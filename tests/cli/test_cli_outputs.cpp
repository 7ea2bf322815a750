// Found by a hostile user at the binary: outputs that block or overwrite what was saved, a prepared
// corpus mixed with an earlier one, unbounded counts, a rerun that made a sweep's point look failed.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "test_util.hpp"

using trainer::test::run_trainer;
namespace fs = std::filesystem;

namespace {

// A tiny GPT on a generated text file, trained `steps` steps into dir/out/g.
fs::path gpt_config(const fs::path& dir, int64_t steps = 2) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "line " + std::to_string(i) + " of some text to train on\n";
  trainer::test::write_file(dir / "text.txt", text);
  trainer::test::write_file(dir / "g.yaml",
                            "run: {name: g, out_dir: out}\n"
                            "model: {arch: gpt, vocab_size: 256, block_size: 8, n_layer: 1, n_head: 2, n_embd: 16}\n"
                            "data: {format: text, path: text.txt, val_fraction: 0.1, workers: 0}\n"
                            "train: {batch_size: 4, max_steps: " + std::to_string(steps) +
                                ", precision: fp32, log_every: 1, threads: 1}\n"
                                "log: {progress: off}\n");
  return dir / "g.yaml";
}

std::string last_kind(const fs::path& metrics) {
  std::istringstream in(trainer::test::read_file(metrics));
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  const auto at = last.find("\"kind\":\"");
  return at == std::string::npos ? "" : last.substr(at + 8, last.find('"', at + 8) - at - 8);
}

}  // namespace

TEST_CASE("outputs: predict and eval refuse a FIFO (whose open blocked past every signal) and the run's own files",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_outputs_fifo");
  const auto cfg = gpt_config(dir).string();
  REQUIRE(run_trainer("run " + cfg, "cd " + dir.string() + " &&").exit_code == 0);
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  const std::string run = (dir / "out" / "g").string();
  auto p = run_trainer("predict " + cfg + " --checkpoint " + run + " --prompt a --max-new-tokens 2 --output " +
                       (dir / "fifo").string(), "cd " + dir.string() + " && " + trainer::test::timeout_prefix(120, "KILL"));
  CHECK(p.exit_code == 2);
  CHECK(p.output.find("--output " + (dir / "fifo").string() + ": is a FIFO (named pipe), not a regular file") != std::string::npos);
  const auto metrics = dir / "out" / "g" / "metrics.jsonl";
  const std::string before = trainer::test::read_file(metrics);
  auto e = run_trainer("eval " + cfg + " --checkpoint " + run + " --output " + metrics.string(), "cd " + dir.string() + " &&");
  CHECK(e.exit_code == 2);
  CHECK(e.output.find("'s metrics.jsonl (what the run saved is not overwritten)") != std::string::npos);
  CHECK(trainer::test::read_file(metrics) == before);
  trainer::test::write_file(dir / "prompt.txt", "hello");
  auto same = run_trainer("predict " + cfg + " --checkpoint " + run + " --prompt-file " + (dir / "prompt.txt").string() +
                          " --output " + (dir / "prompt.txt").string(), "cd " + dir.string() + " &&");
  CHECK(same.exit_code == 2);
  CHECK(trainer::test::read_file(dir / "prompt.txt") == "hello");
}

TEST_CASE("outputs: a run that is already complete adds no attempt record: its records still end with the summary",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_outputs_complete");
  const auto cfg = gpt_config(dir).string();
  REQUIRE(run_trainer("run " + cfg, "cd " + dir.string() + " &&").exit_code == 0);
  const auto metrics = dir / "out" / "g" / "metrics.jsonl";
  REQUIRE(last_kind(metrics) == "summary");
  auto again = run_trainer("run " + cfg + " --set train.log_every=2", "cd " + dir.string() + " &&");
  REQUIRE(again.exit_code == 0);
  CHECK(again.output.find("the run is already complete (2 of 2 steps)") != std::string::npos);
  CHECK(last_kind(metrics) == "summary");
}

TEST_CASE("outputs: prepare-text refuses a folder with shards of another corpus unless --force replaces them",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_outputs_prepare");
  std::string big(30000, 'a'), small(3000, 'b');
  trainer::test::write_file(dir / "big.txt", big);
  trainer::test::write_file(dir / "small.txt", small);
  const std::string out = (dir / "shards").string();
  REQUIRE(run_trainer("prepare-text " + (dir / "big.txt").string() + " --out " + out + " --shard-tokens 5000").exit_code == 0);
  CHECK(fs::exists(dir / "shards" / "train_000005.bin"));
  auto again = run_trainer("prepare-text " + (dir / "small.txt").string() + " --out " + out + " --shard-tokens 5000");
  CHECK(again.exit_code == 2);
  CHECK(again.output.find("prepare-text: " + out + " already holds 7 shard file(s) (train_000000.bin, ...); a run "
                          "reading the folder would mix them with the new ones") != std::string::npos);
  CHECK(fs::exists(dir / "shards" / "train_000005.bin"));  // nothing touched
  auto forced = run_trainer("prepare-text " + (dir / "small.txt").string() + " --out " + out +
                            " --shard-tokens 5000 --force");
  INFO(forced.output);
  CHECK(forced.exit_code == 0);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir / "shards")) left.insert(e.path().filename().string());
  CHECK(left == std::set<std::string>{"train_000000.bin", "val_000000.bin"});
  CHECK(fs::file_size(dir / "shards" / "train_000000.bin") == 1024 + 2 * 2850);  // the small corpus's 95 %
  // a fraction that is not a number is refused before anything is removed (it removed the shards, wrote
  // none and exited 0)
  for (const char* v : {"nan", "-nan", "NaN", "inf"}) {
    auto bad = run_trainer("prepare-text " + (dir / "big.txt").string() + " --out " + out + " --force --val-fraction " + v);
    INFO(bad.output);
    CHECK(bad.exit_code == 2);
    CHECK(bad.output.find("--val-fraction: ") != std::string::npos);
    CHECK(bad.output.find(std::string("expected a finite number, got '") + v + "'") != std::string::npos);
    CHECK(fs::exists(dir / "shards" / "train_000000.bin"));
  }
  // --out naming a file (the input itself), or under one: exit 2 naming it (it was exit 1, "filesystem
  // error: cannot create directories: Not a directory"); the file is left as it was
  const std::string input = (dir / "big.txt").string();
  for (const std::string& to : {input, input + "/sub"}) {
    auto onto = run_trainer("prepare-text " + input + " --out " + to);
    INFO(onto.output);
    CHECK(onto.exit_code == 2);
    CHECK(onto.output.find("prepare-text: --out " + to + ": " + input + " is a file; --out names the folder") !=
          std::string::npos);
  }
  CHECK(trainer::test::read_file(dir / "big.txt") == big);
}

TEST_CASE("outputs: counts without a bound and non-finite numbers are refused at the command line", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_outputs_counts");
  const auto cfg = gpt_config(dir).string();
  auto r = run_trainer("sweep " + cfg + " --set \"optim.lr=uniform(0.01,0.1)\" --random 1000000000 --dry-run",
                       "cd " + dir.string() + " && " + trainer::test::timeout_prefix(120, "KILL"));
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--random 1000000000: at most 100000 points") != std::string::npos);
  for (const char* v : {"inf", "1e999", "nan"}) {
    auto m = run_trainer("check " + cfg + " --memory-gb " + v, "cd " + dir.string() + " &&");
    INFO(m.output);
    CHECK(m.exit_code == 2);
    CHECK(m.output.find(std::string("--memory-gb: expected a finite number, got '") + v + "'") != std::string::npos);
  }
}

TEST_CASE("outputs: what an empty text dataset, a report of a file and predict's thread count say", "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_outputs_messages");
  const auto cfg = gpt_config(dir).string();
  trainer::test::write_file(dir / "empty.txt", "");
  auto empty = run_trainer("check " + cfg + " --set data.path=empty.txt", "cd " + dir.string() + " &&");
  CHECK(empty.exit_code != 0);
  CHECK(empty.output.find("empty.txt: the dataset is empty: 0 tokens") != std::string::npos);  // was "(no files)"
  trainer::test::write_file(dir / "short.txt", std::string(400, 'a'));
  auto tail = run_trainer("check " + cfg + " --set data.path=short.txt --set data.val_fraction=0.01",
                          "cd " + dir.string() + " &&");
  CHECK(tail.exit_code != 0);
  CHECK(tail.output.find("short.txt (its validation tail, data.val_fraction 0.01 of 400 bytes): too short for one "
                         "sample: 4 tokens") != std::string::npos);
  auto report = run_trainer("report " + cfg);
  CHECK(report.exit_code == 2);
  CHECK(report.output.find(cfg + ": not a run directory (a file, not a folder)") != std::string::npos);
  REQUIRE(run_trainer("run " + cfg, "cd " + dir.string() + " &&").exit_code == 0);
  auto p = run_trainer("predict " + cfg + " --checkpoint out/g --prompt a --max-new-tokens 2 --threads 1",
                       "cd " + dir.string() + " &&");
  INFO(p.output);
  CHECK(p.exit_code == 0);
  CHECK(p.output.find("seed 0, 1 threads)") != std::string::npos);  // it said train.threads's count
}
