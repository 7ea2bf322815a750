// Data files that change under a 2-rank run (`trainer launch -n 2`, Gloo; issue 31): the ranks look at
// their files at the boundary vote and agree, so a change seen by any rank ends the whole job as one
// process ends: a checkpoint by the usual collective save at the last completed step, exit 65 on every
// rank, the file named in every rank's log; under data.on_change: reload both ranks reopen the data
// together and train on. A read that fails inside a step on one rank (TRAINER_INJECT_READ_FAILURE)
// ends every rank with 65 within dist.timeout_s, no hang; no checkpoint can be agreed there, the
// last periodic one stays. Each run waits for a metrics record past step 3 before the change.
#include <catch2/catch.hpp>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <regex>

#include "data_change/data_change_runs.hpp"
#include "dist/launcher.hpp"
#include "skip.hpp"

using namespace trainer::test;
using namespace trainer::test::data_change;

namespace {

const char* kLaunch2 = "launch -n 2 -- ";
const char* kDistTimeout = "dist: {timeout_s: 60}\n";

std::string rank_log(const fs::path& dir, int rank) {
  return read_file(dir / ("runs/exp/logs/rank" + std::to_string(rank) + ".log"));
}

// The launcher's line for each rank that ended with `code` (the first failing one, then the others).
int ranks_exited_with(const std::string& log, int code) {
  const std::regex line("launch: rank \\d exited with code " + std::to_string(code) + "\\b");
  return static_cast<int>(std::distance(std::sregex_iterator(log.begin(), log.end(), line), std::sregex_iterator()));
}

// `change` while 2 ranks train on `format` (on_change: error): every rank exits 65 naming the file,
// after one checkpoint at the step they agreed on: the last one recorded. `dist`: the run's dist section.
void check_two_ranks_stop(const std::string& format, Change change, const std::string& tag,
                          const std::string& dist = kDistTimeout) {
  auto dir = scratch_dir("data_change_2r_" + format + "_" + tag);
  const DataSet d = data_set(format, dir);
  d.write(0, d.folder);
  const int64_t size_before = static_cast<int64_t>(fs::file_size(d.file));
  BackgroundRun run(dir, config_for(d, "error") + dist, kLaunch2);
  REQUIRE(wait_for([&] { return run.past_step(3); }, 180));
  apply(change, d);
  const int rc = wait_rc(dir / "run.rc", 180);
  const std::string log = run.log();
  INFO(format << " " << tag << ":\n" << log);
  CHECK(rc == 65);
  CHECK(ranks_exited_with(log, 65) == 2);  // every rank's own exit code, as the launcher reaped it
  const std::string what = d.file.string() + ": the data file changed while the run was using it: " +
                           what_of(change, d, size_before);
  const std::regex saved("saved a checkpoint at step (\\d+); exiting with code 65");
  std::vector<int64_t> steps;  // the step each rank says it saved at
  for (int r : {0, 1}) {
    const std::string own = rank_log(dir, r);
    INFO("rank " << r << ":\n" << own);
    CHECK(contains(own, what));
    std::smatch m;
    REQUIRE(std::regex_search(own, m, saved));
    steps.push_back(std::stoll(m[1].str()));
  }
  CHECK(steps[0] == steps[1]);
  const int64_t step = steps[0];
  CHECK(step > 3);
  CHECK(step >= last_train_step(run.metrics()));  // at or after the last record
  CHECK(fs::exists(dir / ("runs/exp/checkpoints/step-" + std::to_string(step)) / "manifest.json"));
}

}  // namespace

TEST_CASE("data change, 2 ranks: a token shard truncated or replaced ends every rank with 65 after one checkpoint",
          "[e2e][dist]") {
  check_two_ranks_stop("nanogpt", Change::Truncate, "truncate");
  check_two_ranks_stop("llmc", Change::Replace, "replace");
}

TEST_CASE("data change, 2 ranks: an IDX file replaced under dist.sharding gradients ends every rank with 65 after one "
          "checkpoint", "[e2e][dist]") {
  // the collective save of a sharded run: every rank's optimizer shard in the checkpoint
  check_two_ranks_stop("idx", Change::Replace, "replace", "dist: {timeout_s: 60, sharding: gradients}\n");
}

TEST_CASE("data change, 2 ranks: under on_change reload both ranks reopen a replaced shard together and train on",
          "[e2e][dist]") {
  auto dir = scratch_dir("data_reload_2r_nanogpt");
  const DataSet d = data_set("nanogpt", dir);
  d.write(0, d.folder);
  // an evaluation after every step: the one due at the step where the ranks reload still runs, and a
  // replacement landing in it (between the vote and the next read) is found at the next vote
  const std::string config = std::regex_replace(config_for(d, "reload"), std::regex("eval_every: 0"),
                                                "eval_every: 1, eval_steps: 1");
  BackgroundRun run(dir, config + kDistTimeout, kLaunch2);
  REQUIRE(wait_for([&] { return run.past_step(3); }, 180));
  apply(Change::Replace, d);
  // 2800 tokens, 10% validation: (2520 - 1) / 16 = 157 windows, on each rank; each rank says so in
  // its own log (runs/exp/logs/rank<N>.log: rank 1's warnings are not on the launcher's output)
  const std::regex reloaded("data.on_change: reload: reopened the data \\([^\\n]*157 windows[^\\n]*, "
                            "was 112 samples\\) on all 2 ranks together; training goes on at step (\\d+)");
  std::vector<int64_t> steps(2, -1);
  auto both = [&] {
    for (int r = 0; r < 2; ++r) {
      const std::string log = rank_log(dir, r);
      std::smatch m;
      if (!std::regex_search(log, m, reloaded)) return false;
      steps[r] = std::stoll(m[1].str());
    }
    return true;
  };
  INFO(run.log());
  REQUIRE(wait_for(both, 180));
  CHECK(steps[0] == steps[1]);  // the same boundary on both ranks
  REQUIRE(wait_for([&] { return run.past_step(steps[0] + 3); }, 180));
  std::vector<int64_t> evaluated;  // the steps with an eval record: every one, the reload's included
  for (const auto& r : records(run.metrics(), "eval")) evaluated.push_back(r.at("step").get<int64_t>());
  for (int64_t s = 1; s <= steps[0] + 2; ++s) {
    INFO("step " << s);
    CHECK(std::count(evaluated.begin(), evaluated.end(), s) == 1);
  }
  // the launcher (the parent of rank 0) forwards SIGTERM to both ranks: a checkpoint and 75
  const pid_t rank0 = lock_holder(dir / "runs/exp/.lock");
  const auto stat = read_file("/proc/" + std::to_string(rank0) + "/stat");
  const pid_t launcher = static_cast<pid_t>(std::stol(stat.substr(stat.rfind(')') + 4)));
  REQUIRE(::kill(launcher, SIGTERM) == 0);
  CHECK(wait_rc(dir / "run.rc", 180) == 75);
}

namespace {

// A read failing inside step 6 on rank 1 (TRAINER_INJECT_READ_FAILURE) under the run's `dist` section.
void check_read_failure_in_step(const std::string& tag, const std::string& dist) {
  auto dir = scratch_dir("data_change_2r_inject_" + tag);
  const DataSet d = data_set("nanogpt", dir);
  d.write(0, d.folder);
  BackgroundRun run(dir, config_for(d, "error") + dist + "checkpoint: {every_steps: 2}\n", kLaunch2,
                    "TRAINER_INJECT_READ_FAILURE=1:6");
  // from rank 1's failure (its line in the log) to the end of the launch: not the 60 s of dist.timeout_s
  REQUIRE(wait_for([&] { return contains(rank_log(dir, 1), "found inside step 6 on this rank"); }, 240));
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = wait_rc(dir / "run.rc", 240);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = run.log();
  INFO(log);
  CHECK(rc == 65);
  CHECK(ranks_exited_with(log, 65) == 2);
  const std::string failed = "a read failed inside step 6 on rank 1 (TRAINER_INJECT_READ_FAILURE, fault injection)";
  const std::string own = rank_log(dir, 1), peer = rank_log(dir, 0);
  CHECK(contains(own, failed));
  CHECK(contains(own, "found inside step 6 on this rank"));
  CHECK(contains(peer, "rank 1: "));
  CHECK(contains(peer, failed));
  CHECK(contains(peer, "that rank stopped inside step 6 and this rank's collective failed"));
  CHECK(contains(peer, "no checkpoint can be agreed here, the last saved one stays"));
  // the periodic checkpoint before the failing step stays, and nothing later was saved
  CHECK(fs::exists(dir / "runs/exp/checkpoints/step-4/manifest.json"));
  CHECK_FALSE(fs::exists(dir / "runs/exp/checkpoints/step-6"));
  CHECK(last_train_step(run.metrics()) == 5);
  WARN("2 ranks, one read failing inside step 6 (" << tag << "): the launch ended " << wall_s
                                                   << " s after it (dist.timeout_s 60)");
  CHECK(wall_s < 60);
}

}  // namespace

TEST_CASE("data change, 2 ranks: a read failing inside a step on one rank ends both with 65 within dist.timeout_s",
          "[e2e][dist]") {
  check_read_failure_in_step("plain", kDistTimeout);
}

TEST_CASE("data change, 2 ranks, dist.recovery in_process: a rank stopped for changed data is not a lost peer: both "
          "end with 65", "[e2e][dist]") {
  // without the note, the survivor would regroup alone and train on over the changed data
  check_read_failure_in_step("in_process", "dist: {timeout_s: 60, recovery: in_process}\n");
}

namespace {

// Node-local copies of the data that differ (one path, other files on each node): the ranks drew their
// slices of different global orders and trained on in silence (found from outside, exit 0). Rank 1 runs
// in a mount namespace of its own where another file (`other`) is bound over the data path, as on another
// node. Returns the two ranks' logs.
std::pair<std::string, std::string> run_with_other_data_on_rank_1(const std::string& name, const std::string& other) {
  auto dir = scratch_dir(name);
  const DataSet d = data_set("text", dir);
  d.write(0, d.folder);
  write_file(dir / "other/corpus.txt", other);
  write_file(dir / "exp.yaml", config_for(d, "error") + "dist: {timeout_s: 20}\n");
  const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(trainer::dist::free_local_port()) +
                          " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2";
  const std::string run = "\"" + std::string(TRAINER_BIN) + "\" run " + (dir / "exp.yaml").string() + " --out-dir " +
                          (dir / "runs").string();
  const std::string limit = "timeout " + std::to_string(static_cast<int>(120 * timeout_scale())) + " ";
  const std::string bind = "mount --bind " + (dir / "other/corpus.txt").string() + " " + d.file.string();
  const auto both = run_shell("(" + env + " RANK=0 LOCAL_RANK=0 " + limit + run + " > " + (dir / "r0.log").string() +
                              " 2>&1; echo $? > " + (dir / "r0.rc").string() + ") & " + env + " RANK=1 LOCAL_RANK=1 " +
                              limit + "unshare -m sh -c '" + bind + " && exec " + run + "' > " +
                              (dir / "r1.log").string() + " 2>&1; echo $? > " + (dir / "r1.rc").string() + "; wait");
  INFO(both.output);
  const std::string r0 = read_file(dir / "r0.log"), r1 = read_file(dir / "r1.log");
  INFO("rank 0:\n" << r0 << "\nrank 1:\n" << r1);
  CHECK(std::stoi(read_file(dir / "r1.rc")) == 1);
  CHECK(std::stoi(read_file(dir / "r0.rc")) == 1);
  CHECK(last_train_step(dir / "runs/exp/metrics.jsonl") < 1);  // nothing trained
  for (const auto* log : {&r0, &r1})
    CHECK(contains(*log, "the ranks read different data at the same paths: rank " + std::string(log == &r0 ? "0" : "1") +
                             " reads "));
  return {r0, r1};
}

bool can_bind_in_own_namespace() {
  return ::geteuid() == 0 && run_shell("command -v unshare && command -v mount").exit_code == 0;
}

}  // namespace

TEST_CASE("ranks that read different data at the same path stop at start-up naming both sample counts",
          "[e2e][dist]") {
  if (!can_bind_in_own_namespace()) TRAINER_SKIP("a mount namespace of its own for one rank needs root, unshare and mount");
  const auto [r0, r1] = run_with_other_data_on_rank_1("data_differs_2r", random_bytes(2800, 8, 255));
  // 2000 bytes: 112 windows for training and 12 for validation; 2800 bytes: 157 and 17
  CHECK(contains(r1, "rank 1 reads 157 training and 17 validation samples, content digest "));
  CHECK(contains(r1, "), rank 0 112 training and 12 validation samples, content digest "));
  CHECK(contains(r1, ". Every node must see the same files"));
  CHECK(contains(r0, "rank 0 reads 112 training and 12 validation samples, content digest "));
  CHECK(contains(r0, "), rank 1 157 training and 17 validation samples, content digest "));
}

// The same number of samples, other bytes: the counts alone let it through (found from outside).
TEST_CASE("ranks that read files of one length with other content at the same path stop at start-up",
          "[e2e][dist]") {
  if (!can_bind_in_own_namespace()) TRAINER_SKIP("a mount namespace of its own for one rank needs root, unshare and mount");
  const auto [r0, r1] = run_with_other_data_on_rank_1("data_differs_same_length_2r", random_bytes(2000, 99, 255));
  const std::regex digests("rank 1 reads 112 training and 12 validation samples, content digest ([0-9a-f]{12})/([0-9a-f]{12}) "
                           "\\(text [^\\n]*\\), rank 0 112 training and 12 validation samples, content digest ([0-9a-f]{12})/([0-9a-f]{12})\\.");
  std::smatch m;
  REQUIRE(std::regex_search(r1, m, digests));
  CHECK(m[1] != m[3]);  // the training splits differ
  CHECK(m[2] != m[4]);  // and the validation splits
}
