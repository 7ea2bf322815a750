// dist.recovery in_process: a rank SIGKILLed at a random moment costs the survivors at most the step
// in flight. They keep their processes (no restart), regroup without it, go on from memory at the
// smaller world size with the global batch kept by accumulation, log every step once with the world
// size that ran it, and end with the weights of a run that had the smaller world size from that step
// on (a 4-rank checkpoint of that step resumed on 3 ranks; CPU, deterministic).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cmath>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <nlohmann/json.hpp>

#include "ckpt/ckpt_runs.hpp"
#include "ckpt/hardening_util.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "netns.hpp"
#include "skip.hpp"
#include "recovery_runs.hpp"
#include "train_runs.hpp"

namespace fs = std::filesystem;
using namespace trainer;
using namespace trainer::test::recovery;

namespace {

double max_relative_weight_diff(const fs::path& a, const fs::path& b) {
  auto fa = io::load_safetensors(a.string()), fb = io::load_safetensors(b.string());
  std::map<std::string, torch::Tensor> mb(fb.tensors.begin(), fb.tensors.end());
  REQUIRE(fa.tensors.size() == mb.size());
  double worst = 0;
  for (const auto& [name, t] : fa.tensors) {
    INFO(name);
    REQUIRE(mb.count(name) == 1);
    const auto d = (t.to(torch::kFloat64) - mb.at(name).to(torch::kFloat64)).abs().max().item<double>();
    worst = std::max(worst, d / std::max(1e-12, t.abs().max().item<double>()));
  }
  return worst;
}

std::string launch(int n, const std::string& cfg, const fs::path& out, const std::string& extra = "",
                   const std::string& launch_options = "") {
  return std::string("\"") + TRAINER_BIN + "\" launch -n " + std::to_string(n) + launch_options + " -- run " + cfg +
         " --out-dir " + out.string() + extra;
}

struct Trial {
  int victim = 0;
  std::string kill;  // TRAINER_INJECT_KILL
  int64_t committed = 0;  // steps done at 4 ranks
  double recovery_s = 0;  // from the kill to the end of the first step at 3 ranks
};

// Checks one finished trial; fills `t.committed` and `t.recovery_s`.
void check_trial(const fs::path& dir, const test::CommandResult& r, Trial& t) {
  const auto run = dir / "tiny";
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("launch: rank " + std::to_string(t.victim) +
                      " exited with code 137; dist.recovery in_process: the other ranks go on without it") !=
        std::string::npos);
  CHECK(r.output.find("restarting the group") == std::string::npos);
  std::smatch m;
  // the first survivor's log (rank 0's when rank 0 survives; else the rank that took its place)
  const auto log0 = test::read_file(run / ("logs/rank" + std::to_string(t.victim == 0 ? 1 : 0) + ".log"));
  REQUIRE(std::regex_search(log0, m, std::regex(R"(saw a failure after (\d+) committed steps)")));
  t.committed = std::stoll(m[1]);
  REQUIRE(t.committed < kRecoverySteps);

  // every step logged once, with the world size that ran it; one attempt
  const auto train = run_records(run, "train");
  REQUIRE(train.size() == static_cast<size_t>(kRecoverySteps));
  for (int s = 1; s <= kRecoverySteps; ++s) {
    INFO("step " << s);
    CHECK(train[s - 1].at("step") == s);
    CHECK(train[s - 1].at("world_size") == (s <= t.committed ? 4 : 3));
    CHECK(train[s - 1].at("samples") == 24 * s);  // the global batch is kept
  }
  CHECK(run_records(run, "attempt").size() == 1);
  CHECK(run_records(run, "summary").at(0).at("attempts") == 1);
  // the change has a record of its own (the report marks it): after the committed steps, 4 -> 3
  const auto world = run_records(run, "world");
  REQUIRE(world.size() == 1);
  CHECK(world[0].at("step") == t.committed);
  CHECK(world[0].at("previous_world_size") == 4);
  CHECK(world[0].at("world_size") == 3);
  CHECK(world[0].at("reason") == "lost member(s) " + std::to_string(t.victim));

  // the survivors are the processes that started: one start each, the same pid after the regroup
  int new_rank = 0;
  for (int r0 = 0; r0 < 4; ++r0) {
    if (r0 == t.victim) continue;
    const auto log = test::read_file(run / ("logs/rank" + std::to_string(r0) + ".log"));
    INFO("rank " << r0 << ":\n" << log);
    std::smatch start, cont;
    const std::regex started("distributed: rank " + std::to_string(r0) + R"( of 4 \(trainer launch, pid (\d+)\))");
    REQUIRE(std::regex_search(log, start, started));
    const std::regex start_line("distributed: rank");
    CHECK(std::distance(std::sregex_iterator(log.begin(), log.end(), start_line), std::sregex_iterator()) == 1);
    REQUIRE(std::regex_search(log, cont, std::regex("member " + std::to_string(r0) + R"( \(pid (\d+)\) continues as rank )" +
                                                    std::to_string(new_rank) + " of 3")));
    CHECK(start[1] == cont[1]);
    ++new_rank;
  }
  // how long it took: the kill's time is in the victim's last words, the first step's in rank 0's log
  std::smatch k, f;
  REQUIRE(std::regex_search(r.output, k, std::regex(R"(SIGKILLs itself at .* \(unix time ([0-9.]+)\))")));
  REQUIRE(std::regex_search(log0, f, std::regex(R"(done at world size 3, [0-9.]+ s after the failure was seen \(unix time ([0-9.]+)\))")));
  t.recovery_s = std::stod(f[1]) - std::stod(k[1]);
  CHECK(t.recovery_s > 0);
}

// The train records every 10 steps, once each, in order; a last one at the stop's step may follow.
std::vector<nlohmann::json> every_tenth(const std::vector<nlohmann::json>& train) {
  std::vector<nlohmann::json> out;
  for (size_t i = 0; i < train.size(); ++i) {
    const int64_t step = train[i].at("step");
    if (step % 10 != 0 && i + 1 == train.size()) break;  // the checkpoint step of the stop
    INFO("record " << i << ": " << train[i].dump());
    CHECK(step == 10 * static_cast<int64_t>(out.size() + 1));
    out.push_back(train[i]);
  }
  return out;
}

// `trainer launch -n 2` for node `h` of 2 inside namespace host `h`, in the background: its output
// goes to <dir>/host<tag>.log, "rc=<code>" to <dir>/host<tag>.rc.
void start_node(const test::HostNet& net, int h, const fs::path& dir, const std::string& cfg, int port,
                const std::string& tag, const std::string& launch_options = "") {
  const auto log = dir / ("host" + tag + ".log"), rc = dir / ("host" + tag + ".rc");
  const std::string cmd = "( " + net.exec(h) + "\"" + TRAINER_BIN + "\" launch -n 2 --nnodes 2 --node-rank " +
                          std::to_string(h) + " --master-addr " + test::HostNet::addr(0) + " --master-port " +
                          std::to_string(port) + launch_options + " -- run " + cfg + " --out-dir " +
                          (dir / "out").string() + " > " + log.string() + " 2>&1; echo rc=$? > " + rc.string() +
                          " ) < /dev/null > /dev/null 2>&1 &";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

}  // namespace

TEST_CASE("in-process recovery: 12 kills of one rank (rank 0 too) at random moments cost the survivors at most one step",
          "[dist][e2e][slow]") {
  auto dir = test::scratch_dir("recovery_kills");
  const auto cfg = recovery_config(dir);
  // the reference: 4 ranks, a checkpoint after every step, to resume any of them on 3 ranks
  auto ref = test::run_shell(launch(4, cfg, dir / "ref", " --set checkpoint.every_steps=1 --set checkpoint.keep_last=1000"));
  INFO(ref.output);
  REQUIRE(ref.exit_code == 0);

  std::mt19937 rng(20261201);  // fixed: a failing trial can be replayed from its TRAINER_INJECT_KILL
  // collectives from 11 on: the ones before are start-up's (the config hash check, ..., train.precision
  // auto's two, the resume's agreement on its checkpoint), where no recovery is possible yet; #11 is
  // the stop vote before the first step (recovered: found by this test when start-up grew by one)
  std::vector<Trial> trials;
  for (int i = 0; i < 12; ++i) {
    Trial t;
    if (i == 0) {  // one trial at least loses rank 0: its logs and checkpoints move to the next rank
      t.victim = 0;
      t.kill = "0:collective:" + std::to_string(11 + rng() % 280);
      trials.push_back(t);
      continue;
    }
    t.victim = static_cast<int>(rng() % 4);  // rank 0 too: the next survivor takes over its logs and saves
    // half the trials: at a random collective (between gradient buckets, in the loss mean of a record,
    // in a stop-signal check); the others: right after the victim's commit vote, before its step
    t.kill = std::to_string(t.victim) + (i % 2 == 0 ? ":collective:" + std::to_string(11 + rng() % 280)
                                                    : ":vote:" + std::to_string(2 + rng() % 50));
    trials.push_back(t);
  }
  std::map<int64_t, fs::path> resumed;  // committed step -> the reference's final weights from there
  std::vector<double> times;
  double worst_diff = 0;
  for (size_t i = 0; i < trials.size(); ++i) {
    auto& t = trials[i];
    INFO("trial " << i << ": TRAINER_INJECT_KILL=" << t.kill);
    const auto out = dir / ("trial" + std::to_string(i));
    auto r = test::run_shell("TRAINER_INJECT_KILL=" + t.kill + " " + launch(4, cfg, out));
    check_trial(out, r, t);
    times.push_back(t.recovery_s);

    if (!resumed.count(t.committed)) {
      const auto res = dir / ("resumed" + std::to_string(t.committed));
      // no step committed yet: the reference is a 3-rank run from the start (the same initial weights)
      const std::string from = t.committed == 0 ? "" : " --resume " + (dir / "ref/tiny/checkpoints").string() +
                                                            "/step-" + std::to_string(t.committed);
      auto rr = test::run_shell(launch(3, cfg, res, from));
      INFO(rr.output);
      REQUIRE(rr.exit_code == 0);
      resumed[t.committed] = res / "tiny/checkpoints" / ("step-" + std::to_string(kRecoverySteps)) / "model.safetensors";
    }
    const double diff = max_relative_weight_diff(out / "tiny/checkpoints" / ("step-" + std::to_string(kRecoverySteps)) /
                                                     "model.safetensors",
                                                 resumed.at(t.committed));
    INFO("committed steps at 4 ranks: " << t.committed << ", max relative weight difference " << diff);
    CHECK(diff <= 1e-6);
    worst_diff = std::max(worst_diff, diff);
  }
  std::sort(times.begin(), times.end());
  WARN("in-process recovery, kill -9 to the first step at 3 ranks over " << times.size() << " trials: median "
                                                                         << times[times.size() / 2] << " s, max "
                                                                         << times.back() << " s; largest relative "
                                                                         "weight difference to the resumed reference "
                                                                         << worst_diff);
}

// A link taken down (ip link set eth0 down on one of two namespace hosts) is a death after
// dist.timeout_s: the other host's collectives time out, its ranks wait dist.timeout_s for the
// cut-off ranks to check in, and go on as 2 ranks with the global batch kept. The cut-off host's
// ranks cannot reach the store and stop with an error.
TEST_CASE("in-process recovery: a link taken down behaves like a death after dist.timeout_s", "[dist][e2e][netns][slow]") {
  std::string why;
  auto net = test::HostNet::create(2, "R", &why);
  if (!net) TRAINER_SKIP(why);
  auto dir = test::scratch_dir("recovery_link");
  const auto cfg = long_config(dir);
  for (int h = 0; h < 2; ++h) start_node(*net, h, dir, cfg, 29521, std::to_string(h));
  const auto run = dir / "out/tiny";
  constexpr int64_t kDownAfter = 100;  // steps at 4 ranks before the link goes down
  REQUIRE(test::wait_for([&] {
    auto train = run_records(run, "train");
    return !train.empty() && train.back().at("step").get<int64_t>() >= kDownAfter;
  }));
  const double down_at =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  REQUIRE(net->set_link(1, false));
  // 5 records (50 steps) at 2 ranks after the regroup, then a graceful stop
  const bool went_on = test::wait_for([&] { return records_at_world_after_change(run_records(run, "train"), 2) >= 5; });
  if (went_on) stop_job(run);
  const int rc = test::wait_rc(dir / "host0.rc");
  net->kill_host(1);  // its ranks are stuck or gone; its launcher may still wait on them
  const auto log = test::read_file(run / "logs/rank0.log");
  INFO(test::read_file(dir / "host0.log") << "\n--- rank 0\n" << log << "\n--- host 1\n" << test::read_file(dir / "host1.log"));
  REQUIRE(went_on);
  REQUIRE(rc == 75);  // stopped by the test's SIGTERM, after a checkpoint
  CHECK(log.find("lost member(s) 2, 3; member 0") != std::string::npos);
  CHECK(log.find("continues as rank 0 of 2 (generation 1)") != std::string::npos);
  CHECK(log.find("2 x 6 accumulation x 2 ranks = 24 samples per step (global batch kept)") != std::string::npos);
  const auto train = every_tenth(run_records(run, "train"));
  int64_t last4 = 0;
  for (const auto& r : train) {
    if (r.at("world_size") == 4) last4 = r.at("step");
    else CHECK(r.at("world_size") == 2);
  }
  CHECK(last4 >= kDownAfter);
  CHECK(run_records(run, "attempt").size() == 1);  // one attempt: no restart (a stopped run has no summary)
  std::smatch f;
  REQUIRE(std::regex_search(log, f, std::regex(R"(done at world size 2, ([0-9.]+) s after the failure was seen \(unix time ([0-9.]+)\))")));
  const double recovery_s = std::stod(f[2]) - down_at;
  // the collective's time-out, then the wait for the cut-off ranks: about 2 x dist.timeout_s
  CHECK(recovery_s >= 10);
  CHECK(recovery_s < test::scaled(90));
  WARN("link down to the first step at 2 ranks: " << recovery_s << " s (dist.timeout_s 10; regroup " << f[1]
                                                  << " s after the failure was seen)");
}

// Growing back: under `trainer launch --max-restarts 1` the lost rank's replacement joins the running
// group at one of its step boundaries, with rank 0's state over the process group (not from disk),
// and the world size goes back to 4. The final weights are those of the 4-rank checkpoint at the
// failure resumed on 3 ranks, whose checkpoint at the growth is resumed on 4.
TEST_CASE("in-process recovery: a replacement joins the running group and the world size goes back up",
          "[dist][e2e][slow]") {
  auto dir = test::scratch_dir("recovery_grow");
  const auto cfg = recovery_config(dir);
  const std::string every_step = " --set checkpoint.every_steps=1 --set checkpoint.keep_last=1000";
  auto ref = test::run_shell(launch(4, cfg, dir / "ref", every_step));
  INFO(ref.output);
  REQUIRE(ref.exit_code == 0);
  for (const std::string kill : {"1:collective:120", "3:vote:20"}) {
    INFO("TRAINER_INJECT_KILL=" << kill);
    const int victim = kill[0] - '0';
    const auto out = dir / ("grow" + kill.substr(2, 1));
    auto r = test::run_shell("TRAINER_INJECT_KILL=" + kill + " " + launch(4, cfg, out, "", " --max-restarts 1"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("launch: starting a replacement for rank " + std::to_string(victim) +
                        " (1 of 1); it joins the running group") != std::string::npos);
    const auto log0 = test::read_file(out / "tiny/logs/rank0.log");
    std::smatch a, b;
    REQUIRE(std::regex_search(log0, a, std::regex(R"(saw a failure after (\d+) committed steps)")));
    const int64_t shrunk = std::stoll(a[1]);
    if (!std::regex_search(log0, b, std::regex(R"(the group grew from 3 to 4 ranks; member 0 \(pid \d+\) continues as )"
                                               R"(rank 0 of 4 \(generation 2\) after (\d+) committed steps)"))) {
      // a loaded host: the replacement came after the last step. It says so, and the run is the
      // 4-rank checkpoint at the failure resumed on 3 ranks to the end
      CHECK(test::read_file(out / ("tiny/logs/rank" + std::to_string(victim) + ".log"))
                .find("the run ended (finished or stopped) before this replacement could join it") != std::string::npos);
      const auto three = dir / ("late" + kill.substr(2, 1));
      auto r3 = test::run_shell(launch(3, cfg, three, " --resume " + (dir / "ref/tiny/checkpoints").string() + "/step-" +
                                                         std::to_string(shrunk)));
      INFO(r3.output);
      REQUIRE(r3.exit_code == 0);
      const auto last = "tiny/checkpoints/step-" + std::to_string(kRecoverySteps) + "/model.safetensors";
      CHECK(max_relative_weight_diff(out / last, three / last) <= 1e-6);
      WARN(kill << ": the replacement came after the last step (a loaded host); checked as 4 then 3 ranks");
      continue;
    }
    const int64_t grown = std::stoll(b[1]);
    REQUIRE(shrunk < grown);
    REQUIRE(grown < kRecoverySteps);
    CHECK(std::regex_search(test::read_file(out / ("tiny/logs/rank" + std::to_string(victim) + ".log")),
                            std::regex("member " + std::to_string(victim) + R"( \(pid \d+\) joined the running group, )"
                                       R"(with rank 0's state \(not from a checkpoint\), as rank )" +
                                       std::to_string(victim) + " of 4")));
    const auto train = run_records(out / "tiny", "train");
    REQUIRE(train.size() == static_cast<size_t>(kRecoverySteps));
    for (int s = 1; s <= kRecoverySteps; ++s) {
      INFO("step " << s);
      CHECK(train[s - 1].at("step") == s);
      CHECK(train[s - 1].at("world_size") == (s <= shrunk || s > grown ? 4 : 3));
    }
    CHECK(run_records(out / "tiny", "summary").at(0).at("attempts") == 1);
    const auto world = run_records(out / "tiny", "world");
    REQUIRE(world.size() == 2);
    CHECK(world[0].at("step") == shrunk);
    CHECK(world[0].at("world_size") == 3);
    CHECK(world[1].at("step") == grown);
    CHECK(world[1].at("previous_world_size") == 3);
    CHECK(world[1].at("world_size") == 4);
    CHECK(world[1].at("reason") == "replacement(s) joined");

    // the reference: 4 ranks up to `shrunk`, 3 up to `grown`, then 4 again, through checkpoints
    const auto three = dir / ("three" + kill.substr(2, 1)), four = dir / ("four" + kill.substr(2, 1));
    auto r3 = test::run_shell(launch(3, cfg, three, every_step + " --resume " + (dir / "ref/tiny/checkpoints").string() +
                                                        "/step-" + std::to_string(shrunk)));
    INFO(r3.output);
    REQUIRE(r3.exit_code == 0);
    auto r4 = test::run_shell(launch(4, cfg, four, " --resume " + (three / "tiny/checkpoints").string() + "/step-" +
                                                       std::to_string(grown)));
    INFO(r4.output);
    REQUIRE(r4.exit_code == 0);
    const auto last = "tiny/checkpoints/step-" + std::to_string(kRecoverySteps) + "/model.safetensors";
    const double diff = max_relative_weight_diff(out / last, four / last);
    WARN(kill << ": 4 ranks to step " << shrunk << ", 3 to " << grown << ", then 4; max relative weight difference to "
              "the reference " << diff);
    CHECK(diff <= 1e-6);
  }
}

// A host that comes back grows the job again: 2 namespace hosts x 2 ranks; every process of host 1
// is SIGKILLed (its launcher too), host 0 goes on as 2 ranks, then host 1's launcher starts again
// with --join and its 2 ranks join the running group: 4 -> 2 -> 4 ranks, one attempt.
TEST_CASE("in-process recovery: a host lost and started again with --join grows the job back", "[dist][e2e][netns][slow]") {
  std::string why;
  auto net = test::HostNet::create(2, "G", &why);
  if (!net) TRAINER_SKIP(why);
  auto dir = test::scratch_dir("recovery_host");
  const auto cfg = long_config(dir);
  auto start = [&](int h, const std::string& tag, const std::string& extra) { start_node(*net, h, dir, cfg, 29523, tag, extra); };
  start(0, "0", "");
  start(1, "1", "");
  const auto run = dir / "out/tiny";
  REQUIRE(test::wait_for([&] {
    auto train = run_records(run, "train");
    return !train.empty() && train.back().at("step").get<int64_t>() >= 100;
  }));
  net->kill_host(1);
  REQUIRE(test::wait_for([&] {
    return test::read_file(run / "logs/rank0.log").find("continues as rank 0 of 2") != std::string::npos;
  }));
  start(1, "1b", " --join");
  // 5 records (50 steps) at 4 ranks again after the growth, then a graceful stop of the whole job
  const bool grew = test::wait_for([&] {
    const auto log = test::read_file(run / "logs/rank0.log");
    return log.find("the group grew from") != std::string::npos &&
           records_at_world_after_change(run_records(run, "train"), 4) >= 5;
  });
  if (grew) stop_job(run);
  const int rc0 = test::wait_rc(dir / "host0.rc"), rc1 = test::wait_rc(dir / "host1b.rc");
  if (!grew || rc1 < 0) net->kill_host(1);
  const auto log = test::read_file(run / "logs/rank0.log");
  INFO(test::read_file(dir / "host0.log") << "\n--- rank 0\n" << log << "\n--- host 1, again\n"
                                          << test::read_file(dir / "host1b.log"));
  REQUIRE(grew);
  REQUIRE(rc0 == 75);  // stopped by the test's SIGTERM, forwarded to every rank: all save at one step
  CHECK(rc1 == 75);
  CHECK(log.find("lost member(s) 2, 3; member 0") != std::string::npos);
  // the two ranks of host 1 join together, or one after the other
  CHECK(std::regex_search(log, std::regex(R"(the group grew from [23] to 4 ranks; member 0 \(pid \d+\) continues as rank )"
                                          R"(0 of 4 \(generation \d+\) after \d+ committed steps, 2 x 3 accumulation)")));
  CHECK(log.find("no member lost") == std::string::npos);
  std::vector<int64_t> worlds;  // the world sizes in step order, each change once
  for (const auto& r : every_tenth(run_records(run, "train"))) {
    const int64_t w = r.at("world_size");
    if (worlds.empty() || worlds.back() != w) worlds.push_back(w);
  }
  INFO("world sizes in step order: " << nlohmann::json(worlds).dump());
  CHECK((worlds == std::vector<int64_t>{4, 2, 4} || worlds == std::vector<int64_t>{4, 2, 3, 4}));
  CHECK(run_records(run, "attempt").size() == 1);  // one attempt: no restart (a stopped run has no summary)
  CHECK(run_records(run, "train").back().at("world_size") == 4);  // the stop's step too
}

// A replacement that comes too late: the group finishes before it could join. The replacement ends
// at once (exit 0) instead of waiting dist.timeout_s, and so does the launcher.
TEST_CASE("in-process recovery: a replacement started as the run ends exits at once", "[dist][e2e]") {
  auto dir = test::scratch_dir("recovery_late");
  const auto cfg = recovery_config(dir, /*timeout_s=*/120);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = test::run_shell("TRAINER_INJECT_KILL=2:vote:" + std::to_string(kRecoverySteps - 1) + " " +
                           launch(4, cfg, dir / "out", "", " --max-restarts 1"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("launch: starting a replacement for rank 2 (1 of 1)") != std::string::npos);
  CHECK(test::read_file(dir / "out/tiny/logs/rank2.log")
            .find("the run ended (finished or stopped) before this replacement could join it") != std::string::npos);
  CHECK(s < 60);  // not dist.timeout_s (120 s) of waiting
  CHECK(run_records(dir / "out/tiny", "train").size() == static_cast<size_t>(kRecoverySteps));
}

// A rank that dies between its gradient sync and its commit vote fails no collective of its peers:
// they learn of it from its launcher's death mark (looked for about once a second while the vote
// stalls), not from the vote's dist.timeout_s (300 s here), and redo the step on 3 ranks.
TEST_CASE("in-process recovery: a rank killed before its commit vote is seen by its launcher's mark, not a time-out",
          "[dist][e2e]") {
  auto dir = test::scratch_dir("recovery_unvoted");
  const auto cfg = recovery_config(dir, /*timeout_s=*/300);
  auto r = test::run_shell("TRAINER_INJECT_KILL=2:unvoted:20 " + launch(4, cfg, dir / "out"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto log0 = test::read_file(dir / "out/tiny/logs/rank0.log");
  CHECK(log0.find("member 2's process ended before it voted on step 20 (its launcher's mark)") != std::string::npos);
  CHECK(log0.find("did not finish within dist.timeout_s") == std::string::npos);
  CHECK(log0.find("lost member(s) 2;") != std::string::npos);
  const auto train = run_records(dir / "out/tiny", "train");
  REQUIRE(train.size() == static_cast<size_t>(kRecoverySteps));
  for (int s = 1; s <= kRecoverySteps; ++s) {
    INFO("step " << s);
    CHECK(train[s - 1].at("step") == s);
    CHECK(train[s - 1].at("world_size") == (s < 20 ? 4 : 3));
  }
}

// What the survivors do after a regroup equals the chain of checkpoints resumed at the smaller world,
// to the bit, with dropout drawing random numbers (found from outside):
//   a step given up (rank 2 lost before its commit vote on step 21) is redone with its own draws; it
//     drew the next dropout key, and every later step's was one ahead of the chain's;
//   a record the loss interrupted (rank 2 lost after its vote on step 20: the others commit, and the
//     record's all-reduce fails) is written again before the step's save; the save came first and
//     held the interval's losses, so a resume from it averaged step 20's into step 21's record.
TEST_CASE("in-process recovery: the survivors' steps equal the chain of checkpoints, with dropout", "[dist][e2e]") {
  auto dir = test::scratch_dir("recovery_chain");
  std::string yaml = test::read_file(recovery_config(dir));
  yaml.replace(yaml.find("dropout: 0.0"), 12, "dropout: 0.1");
  yaml += "checkpoint:\n  every_steps: 5\n  keep_last: 100\n";
  test::write_file(dir / "dropout.yaml", yaml);
  const std::string cfg = (dir / "dropout.yaml").string();
  for (const std::string kill : {"2:unvoted:21", "2:vote:20"}) {
    const auto out = dir / ("in_process_" + kill.substr(2, kill.find(':', 2) - 2)), run = out / "tiny";
    auto r = test::run_shell("TRAINER_INJECT_KILL=" + kill + " " + launch(4, cfg, out));
    INFO(kill << "\n" << r.output);
    REQUIRE(r.exit_code == 0);
    const auto train = run_records(run, "train");
    REQUIRE(train.size() == static_cast<size_t>(kRecoverySteps));
    // the chain: the run's own step-20 checkpoint resumed by 3 ranks
    const auto chain = out.string() + "_chain";
    auto c = test::run_shell(launch(3, cfg, chain, " --resume " + (run / "checkpoints" / io::step_dir_name(20)).string()));
    INFO(c.output);
    REQUIRE(c.exit_code == 0);
    const auto chained = run_records(fs::path(chain) / "tiny", "train");
    REQUIRE(chained.size() == static_cast<size_t>(kRecoverySteps - 20));
    for (size_t i = 0; i < chained.size(); ++i) {
      INFO("step " << chained[i].at("step"));
      CHECK(train[i + 20].at("step") == chained[i].at("step"));
      CHECK(train[i + 20].at("loss").get<double>() == chained[i].at("loss").get<double>());
    }
    const auto last = io::step_dir_name(kRecoverySteps);
    CHECK(max_relative_weight_diff(run / "checkpoints" / last / "model.safetensors",
                                   fs::path(chain) / "tiny/checkpoints" / last / "model.safetensors") == 0);
    // the record of step 20 lacks the lost rank's losses after the vote's kill: it says so; no other
    // record lacks any (a step given up is redone whole by the survivors)
    for (const auto& rec : train) {
      INFO("step " << rec.at("step"));
      CHECK(rec.contains("loss_ranks") == (kill == "2:vote:20" && rec.at("step") == 20));
    }
    if (kill == "2:vote:20") CHECK(train[19].at("loss_ranks") == 3);
  }
  // the last step's record, after a rank lost between that step's commit and its record: written by
  // the survivors before the end (it was lost, exit 0; found from outside)
  const auto out = dir / "last", run = out / "tiny";
  auto r = test::run_shell("TRAINER_INJECT_KILL=2:vote:" + std::to_string(kRecoverySteps) + " " + launch(4, cfg, out));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto train = run_records(run, "train");
  REQUIRE(train.size() == static_cast<size_t>(kRecoverySteps));
  CHECK(train.back().at("step") == kRecoverySteps);
  CHECK(train.back().at("world_size") == 4);
  CHECK(train.back().at("loss_ranks") == 3);
  CHECK(run_records(run, "summary").size() == 1);
}
