// Data files that change under a running `trainer run` (issue 31): a text file, llm.c and nanoGPT
// token shards, IDX and CIFAR files are truncated, deleted or replaced while the run trains on them.
// Every case ends with exit 65 naming the file and what happened to it, after a checkpoint at the
// last completed step, or, under data.on_change: reload, reopens the data and trains on. Never a
// signal (a SIGBUS was exit 135). Each run waits for a metrics record past step 3 before the change.
#include <catch2/catch.hpp>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <random>
#include <regex>

#include "data_change/data_change_runs.hpp"

using namespace trainer::test;
using namespace trainer::test::data_change;

namespace {

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

TEST_CASE("data change: under on_change reload an IDX set caught half replaced is tried again and reopened whole",
          "[e2e]") {
  // a job renaming the new files one at a time, caught between them: the labels are new (160), the
  // images still old (112), so the reopen fails; the images renamed after the first failed try is
  // logged, the next try reopens the whole new set
  auto dir = scratch_dir("data_reload_idx_half");
  const DataSet d = data_set("idx", dir);
  d.write(0, d.folder);
  BackgroundRun run(dir, config_for(d, "reload"));
  REQUIRE(wait_for([&] { return run.past_step(3); }, 180));
  const fs::path fresh = dir / "fresh";
  fs::create_directories(fresh);
  d.write(1, fresh);
  fs::rename(fresh / "train-labels-idx1-ubyte", d.folder / "train-labels-idx1-ubyte");
  REQUIRE(wait_for([&] { return contains(run.log(), "data.on_change: reload: try 1 of 4 to reopen the data failed ("); },
                   180));
  fs::rename(fresh / d.file.filename(), d.file);
  const std::regex reloaded("reopened the data \\(([^\\n]*), was (\\d+) samples\\); training goes on at step (\\d+)");
  REQUIRE(wait_for([&] { return std::regex_search(run.log(), reloaded); }, 180));
  const std::string log = run.log();
  std::smatch m;
  REQUIRE(std::regex_search(log, m, reloaded));
  INFO(log);
  CHECK(contains(m[1].str(), "160 images"));
  CHECK(m[2].str() == "112");
  CHECK_FALSE(contains(log, "cannot be reopened"));
  REQUIRE(wait_for([&] { return run.past_step(std::stoll(m[3].str()) + 2); }, 180));
  REQUIRE(::kill(lock_holder(dir / "runs/exp/.lock"), SIGTERM) == 0);
  CHECK(wait_rc(dir / "run.rc", 180) == 75);
}

TEST_CASE("data change: a reload keeps the evaluation due at its step (an evaluation after every step)", "[e2e]") {
  // a 2-rank run would race here: its evaluation sits between the boundary vote and the next step's
  // read, where a change found inside a step cannot be agreed (docs/RELIABILITY.md)
  auto dir = scratch_dir("data_reload_evals");
  const DataSet d = data_set("nanogpt", dir);
  d.write(0, d.folder);
  const std::string config = std::regex_replace(config_for(d, "reload"), std::regex("eval_every: 0"),
                                                "eval_every: 1, eval_steps: 1");
  BackgroundRun run(dir, config);
  REQUIRE(wait_for([&] { return run.past_step(3); }, 180));
  apply(Change::Replace, d);
  const std::regex reloaded("data.on_change: reload: reopened the data [^\\n]*; training goes on at step (\\d+)");
  int64_t at = -1;
  REQUIRE(wait_for([&] {
    const std::string log = run.log();
    std::smatch m;
    if (!std::regex_search(log, m, reloaded)) return false;
    at = std::stoll(m[1].str());
    return true;
  }, 180));
  REQUIRE(wait_for([&] { return run.past_step(at + 3); }, 180));
  std::vector<int64_t> evaluated;  // the steps with an eval record: every one, the reload's included
  for (const auto& r : records(run.metrics(), "eval")) evaluated.push_back(r.at("step").get<int64_t>());
  INFO(run.log());
  for (int64_t s = 1; s <= at + 2; ++s) {
    INFO("step " << s);
    CHECK(std::count(evaluated.begin(), evaluated.end(), s) == 1);
  }
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

TEST_CASE("data change: the validation shard truncated under a run (its own val_path) ends it with exit 65 naming it",
          "[e2e]") {
  // the evaluation never runs here (eval_every 0): the change is found by the boundary's look at the
  // files, the validation split's as well as the training one's
  auto dir = scratch_dir("data_change_val_truncate");
  const DataSet d = data_set("nanogpt", dir);
  d.write(0, d.folder);
  const fs::path val = d.folder / "val_000.bin";
  write_file(val, uint16_tokens(600, 5));
  const std::string config = std::regex_replace(config_for(d, "error"), std::regex("path: ([^,]+),"),
                                                "path: $1, val_path: " + val.string() + ",");
  BackgroundRun run(dir, config);
  REQUIRE(wait_for([&] { return run.past_step(3); }, 180));
  fs::resize_file(val, 0);
  const int rc = wait_rc(dir / "run.rc", 180);
  const std::string log = run.log();
  INFO(log);
  CHECK(rc == 65);
  CHECK(contains(log, val.string() + ": the data file changed while the run was using it: it was truncated from 1200 "
                                     "to 0 bytes"));
  std::smatch m;
  REQUIRE(std::regex_search(log, m, std::regex("saved a checkpoint at step (\\d+); exiting with code 65")));
  CHECK(fs::exists(dir / ("runs/exp/checkpoints/step-" + m[1].str()) / "manifest.json"));
}
