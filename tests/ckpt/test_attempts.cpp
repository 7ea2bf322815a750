// A run over several attempts (hardening): totals add up, each step is logged once, a torn last line
// is cut off, and stop signals at any moment of start-up (SIGHUP included) exit 75.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <thread>
#include <vector>

#include "ckpt_runs.hpp"
#include "hardening_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace trainer::test;

namespace {

bool contains_text(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Every line of a metrics file is a JSON object (no torn or glued lines).
void require_every_line_json(const fs::path& metrics) {
  std::istringstream in(read_file(metrics));
  int n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    INFO("line " << n + 1 << ": " << line);
    REQUIRE(nlohmann::json::parse(line, nullptr, false).is_object());
  }
}

}  // namespace

TEST_CASE("attempts: a resume continues the clock, logs recomputed steps once, adds up the wall time", "[e2e]") {
  auto dir = scratch_dir("attempts_totals");
  write_file(dir / "c.yaml", tiny_config("c", 12, "checkpoint: {every_steps: 4, keep_last: 5}\n"));
  const std::string cfg = (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string();
  REQUIRE(run_trainer("run " + cfg).exit_code == 0);
  const fs::path run = dir / "runs/c", metrics = run / "metrics.jsonl";
  double first_last_time = 0;
  for (const auto& kind : {"train", "eval"})
    for (const auto& j : records(metrics, kind)) first_last_time = std::max(first_last_time, j.at("time_s").get<double>());
  const double step4_time = nlohmann::json::parse(read_file(run / "checkpoints/step-4/state.json")).at("time_s");
  CHECK(step4_time > 0);
  // as if killed at step 12 before its checkpoints 8 and 12 were complete, mid-way through a record
  fs::remove_all(run / "checkpoints/step-12");
  fs::remove_all(run / "checkpoints/step-8");
  { std::ofstream(metrics, std::ios::app) << R"({"kind": "train", "step": 13, "lo)"; }

  auto r = run_trainer("run " + cfg + " --set train.max_steps=16");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(contains_text(r.output, "removed a torn last line (33 bytes) left by an interrupted run"));
  CHECK(contains_text(r.output, "(recomputed after the resume; not logged again)"));
  require_every_line_json(metrics);

  std::vector<int64_t> steps;
  for (const auto& j : records(metrics, "train")) steps.push_back(j.at("step").get<int64_t>());
  CHECK(steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  std::set<int64_t> eval_steps;
  for (const auto& j : records(metrics, "eval")) CHECK(eval_steps.insert(j.at("step").get<int64_t>()).second);

  const auto attempts = records(metrics, "attempt");
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[0].at("attempt") == 1);
  CHECK(attempts[0].at("start_step") == 0);
  CHECK(attempts[0].at("resumed_from").is_null());
  CHECK(attempts[1].at("attempt") == 2);
  CHECK(attempts[1].at("start_step") == 4);
  CHECK(attempts[1].at("resumed_from") == (run / "checkpoints/step-4").string());
  CHECK(attempts[1].at("time_s").get<double>() == step4_time);
  // the clock continues from the checkpoint's: the second attempt's records lie between that time
  // and that time plus the attempt's own wall time
  const double attempt2_wall = records(metrics, "summary").back().at("attempt_wall_s").get<double>();
  for (const auto& j : records(metrics, "train"))
    if (j.at("step").get<int64_t>() > 12) {
      CHECK(j.at("time_s").get<double>() > step4_time);
      CHECK(j.at("time_s").get<double>() <= step4_time + attempt2_wall + 1e-9);
    }

  const auto summaries = records(metrics, "summary");
  REQUIRE(summaries.size() == 2);
  const auto& s = summaries.back();
  CHECK(s.at("attempts") == 2);
  // all attempts: the first one's measured time (its last record) plus this one's
  CHECK(s.at("wall_s").get<double>() - s.at("attempt_wall_s").get<double>() == Approx(first_last_time).epsilon(1e-9));
  CHECK(contains_text(r.output, "over 2 attempts ("));
}

TEST_CASE("stop signals: SIGHUP (a closed terminal) saves a checkpoint and exits 75", "[e2e]") {
  auto dir = scratch_dir("sighup");
  write_file(dir / "c.yaml", tiny_config("c", 1000000, ""));
  start_trainer("run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string(), dir / "a.log", dir / "a.rc");
  const fs::path metrics = dir / "runs/c/metrics.jsonl";
  REQUIRE(wait_for([&] { return fs::exists(metrics) && !records(metrics, "train").empty(); }));
  REQUIRE(::kill(lock_holder(dir / "runs/c/.lock"), SIGHUP) == 0);
  CHECK(wait_rc(dir / "a.rc") == 75);
  const auto log = read_file(dir / "a.log");
  INFO(log);
  CHECK(contains_text(log, "SIGHUP received: saving a checkpoint at step "));
  CHECK(fs::exists(dir / "runs/c/checkpoints/latest/manifest.json"));
}

TEST_CASE("stop signals: SIGHUP to trainer launch stops every rank with a checkpoint", "[e2e][dist]") {
  auto dir = scratch_dir("sighup_launch");
  write_file(dir / "c.yaml", tiny_config("c", 1000000, ""));
  start_trainer("launch -n 2 -- run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string(),
                dir / "a.log", dir / "a.rc");
  const fs::path metrics = dir / "runs/c/metrics.jsonl";
  REQUIRE(wait_for([&] { return fs::exists(metrics) && !records(metrics, "train").empty(); }));
  // the launcher: the parent of rank 0
  const pid_t rank0 = lock_holder(dir / "runs/c/.lock");
  const auto stat = read_file("/proc/" + std::to_string(rank0) + "/stat");
  const pid_t launcher = static_cast<pid_t>(std::stol(stat.substr(stat.rfind(')') + 4)));
  REQUIRE(::kill(launcher, SIGHUP) == 0);
  CHECK(wait_rc(dir / "a.rc") == 75);
  INFO(read_file(dir / "a.log"));
  CHECK(fs::exists(dir / "runs/c/checkpoints/latest/manifest.json"));
}

// A peer stopped (SIGSTOP: hung, not dead) and then a stop signal: stopping and its checkpoint need
// every rank, so rank 0 waits up to dist.timeout_s; it says why within seconds (it had been silent
// for the whole timeout), then ends with an error, the checkpoints already saved kept.
TEST_CASE("stop signals: with a peer hung, rank 0 says why it does not stop, then fails after dist.timeout_s",
          "[e2e][dist]") {
  auto dir = scratch_dir("stop_hung_peer");
  write_file(dir / "c.yaml", tiny_config("c", 1000000, "checkpoint: {every_steps: 2}\ndist: {timeout_s: 10}\n"));
  start_trainer("launch -n 2 -- run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string(),
                dir / "a.log", dir / "a.rc");
  const fs::path run = dir / "runs/c";
  REQUIRE(wait_for([&] { return fs::exists(run / "checkpoints/latest/manifest.json"); }));
  const pid_t rank0 = lock_holder(run / ".lock"), rank1 = lock_holder(run / "logs/.rank1.lock");
  REQUIRE(rank0 > 0);
  REQUIRE(rank1 > 0);
  REQUIRE(::kill(rank1, SIGSTOP) == 0);
  REQUIRE(::kill(rank0, SIGTERM) == 0);
  const std::string notice = "for its peers, and SIGTERM asks the run to stop: stopping (and the checkpoint it saves) "
                             "needs every rank, so this rank waits on, up to dist.timeout_s=10 s in all";
  CHECK(wait_for([&] { return contains_text(read_file(dir / "a.log"), notice); }, scaled(60)));
  const int rc = wait_rc(dir / "a.rc", scaled(120));
  if (rc < 0) ::kill(rank1, SIGKILL);  // the test's own stopped process, by PID
  const auto log = read_file(dir / "a.log");
  INFO(log);
  CHECK(rc == 1);
  CHECK(std::regex_search(log, std::regex(R"(\[rank0\] rank 0: \w+ #\d+ \([^)]*\) at step \d+ has waited \d+ s )")));
  CHECK(contains_text(log, "launch: rank 0 exited with code 1"));
  CHECK(fs::exists(run / "checkpoints/latest/manifest.json"));  // what was saved is kept
}

TEST_CASE("stop signals: a signal during start-up exits 75 with nothing lost", "[e2e]") {
  // From the front's first instruction (apps/trainer/front.cpp) through the dynamic loader, LibTorch's
  // initialisers, the config, the model and the data to the first step: a signal anywhere in there is
  // a graceful stop. Each signal twice: at once (the front is running, the loader not yet) and at a
  // random moment of the next 2 s (start-up takes about 1 s quiet, several at load 8).
  auto dir = scratch_dir("startup_signal");
  write_file(dir / "c.yaml", tiny_config("c", 1000000, ""));
  const std::vector<std::string> run{"run", (dir / "c.yaml").string(), "--out-dir", (dir / "runs").string()};
  const std::vector<std::string> launch{"launch", "-n", "2", "--", "run", (dir / "c.yaml").string(), "--out-dir",
                                        (dir / "runs").string()};
  std::mt19937 rng(20261201);
  std::uniform_int_distribution<int> later_ms(0, 2000);
  struct Signal {
    int sig;
    const char* name;
  };
  int n = 0;
  for (const auto& [sig, name] : {Signal{SIGTERM, "SIGTERM"}, Signal{SIGINT, "SIGINT"}, Signal{SIGUSR1, "SIGUSR1"},
                                  Signal{SIGHUP, "SIGHUP"}})
    for (const int delay_ms : {0, later_ms(rng)}) {
      // two through trainer launch (it forwards them; its ranks start with them blocked)
      const bool via_launch = (sig == SIGTERM && delay_ms > 0) || (sig == SIGHUP && delay_ms == 0);
      const auto log = dir / ("run" + std::to_string(n++) + ".log");
      const pid_t pid = spawn_trainer(via_launch ? launch : run, log);
      REQUIRE(wait_for([&] { return trainer_started(pid); }));
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));  // the moment to signal, not a wait
      REQUIRE(::kill(pid, sig) == 0);
      const int rc = wait_pid(pid);
      INFO(name << " " << delay_ms << " ms after the start" << (via_launch ? " (trainer launch)" : "") << ":\n"
                << read_file(log));
      CHECK(rc == 75);
      CHECK(contains_text(read_file(log), std::string(name) + " received"));
      // at once: surely before the first step, and the handler says so (no "saving a checkpoint")
      if (delay_ms == 0)
        CHECK(contains_text(read_file(log), std::string(name) + " received during start-up; the run stops before its "
                                                                "first step"));
    }
}

TEST_CASE("stop signals: a rank waiting at start-up for a peer that never comes stops within seconds of SIGTERM, exit 75",
          "[e2e][dist]") {
  // The process group's rendezvous waited dist.timeout_s in the store, deaf to the signal: the peer of
  // a rank that died at start-up was SIGKILLed by the launcher's grace period (found 2026-12-06).
  // Three ways to wait: in a file store for rank 0's keys; hosting the TCP store for a rank 1 that never
  // comes (its server waited for its clients in the store's constructor); connecting to a store host that
  // never comes (the client's retries ran past the timeout); connecting to a host that accepts and never
  // answers (the store's constructor waited for its ping's answer with no time-out, 2026-12-07).
  auto dir = scratch_dir("startup_signal_rendezvous");
  write_file(dir / "c.yaml", tiny_config("c", 10, ""));
  const SilentListener silent;
  struct Alone {
    std::string name;
    int rank;
    std::string store, port;
  };
  for (const auto& [name, rank, store, port] :
       {Alone{"r1file", 1, "file://" + (dir / "store").string(), "29999"}, Alone{"r0tcp", 0, "", "29997"},
        Alone{"r1tcp", 1, "", "29996"}, Alone{"r1silent", 1, "", std::to_string(silent.port())}}) {
    INFO(name);
    const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " RANK=" + std::to_string(rank) +
                            " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) + " LOCAL_WORLD_SIZE=2";
    start_trainer("run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string() + " --set run.name=" +
                      name + " --set dist.timeout_s=900" + (store.empty() ? "" : " --set dist.store=" + store),
                  dir / (name + ".log"), dir / (name + ".rc"), env);
    const auto lock = rank == 0 ? dir / "runs" / name / ".lock" : dir / "runs" / name / "logs/.rank1.lock";
    REQUIRE(wait_for([&] { return lock_holder(lock) > 0; }));  // started: its peer never comes
    REQUIRE(::kill(lock_holder(lock), SIGTERM) == 0);
    const int rc = wait_rc(dir / (name + ".rc"), 300);  // (it would have waited 900 s)
    INFO(read_file(dir / (name + ".log")));
    CHECK(rc == 75);
    CHECK(contains_text(read_file(dir / (name + ".log")), "SIGTERM received"));
  }
}

TEST_CASE("a store host that accepts and never answers: the rank fails after dist.timeout_s, naming it", "[e2e][dist]") {
  auto dir = scratch_dir("silent_store_host");
  write_file(dir / "c.yaml", tiny_config("c", 10, ""));
  const SilentListener silent;
  start_trainer("run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string() + " --set dist.timeout_s=5",
                dir / "r1.log", dir / "r1.rc",
                "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(silent.port()) +
                    " RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2");
  const int rc = wait_rc(dir / "r1.rc", 300);  // (it waited forever)
  INFO(read_file(dir / "r1.log"));
  CHECK(rc == 1);
  CHECK(contains_text(read_file(dir / "r1.log"), "error: rank 1: rendezvous at 127.0.0.1:" + std::to_string(silent.port()) +
                                                      ": the host accepted the connection but did not answer within "
                                                      "dist.timeout_s (5 s)"));
}

TEST_CASE("attempts: the wall time counts an attempt that died before its first record up to the checkpoint it saved",
          "[e2e]") {
  auto dir = scratch_dir("wall_unlogged_attempt");
  // a log interval longer than the first attempt's life: it writes no train record before its crash
  std::string cfg = tiny_config("w", 20, "checkpoint: {every_steps: 5, keep_last: 10}\n");
  const auto at = cfg.find("log_every: 1,");
  REQUIRE(at != std::string::npos);
  write_file(dir / "w.yaml", cfg.replace(at, 13, "log_every: 1000,"));
  const std::string run = "run " + (dir / "w.yaml").string() + " --out-dir " + (dir / "runs").string();
  auto crashed = run_trainer(run, "TRAINER_INJECT_CRASH=12");
  INFO(crashed.output);
  REQUIRE(crashed.exit_code != 0);
  REQUIRE(records(dir / "runs/w/metrics.jsonl", "train").empty());
  auto again = run_trainer(run);
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  const auto state = nlohmann::json::parse(read_file(dir / "runs/w/checkpoints/step-10/state.json"));
  const auto summary = records(dir / "runs/w/metrics.jsonl", "summary");
  REQUIRE(summary.size() == 1);
  const double wall = summary[0].at("wall_s"), attempt = summary[0].at("attempt_wall_s"), saved = state.at("time_s");
  CHECK(saved > 0);
  CHECK(wall >= saved + attempt - 1e-6);  // it was the last attempt's alone
}
