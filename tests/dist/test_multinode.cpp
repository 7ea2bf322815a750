// Several hosts for real: two "hosts" as network namespaces (netns.hpp), each with its own address
// on a private bridge, run 2 ranks each under trainer launch --nnodes 2 and under torchrun
// --nnodes 2; the losses must equal a 4-rank run on one host bit for bit (CPU, deterministic: the
// ring all-reduce sums in the same order wherever the ranks live). Also the interface choice
// (dist.interface, trainer check's network column), trainer launch --max-restarts, and pipeline
// parallel with a stage on each host.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <functional>
#include <regex>
#include <string>

#include "ckpt/ckpt_runs.hpp"
#include "ckpt/hardening_util.hpp"
#include "dist/launcher.hpp"
#include "netns.hpp"
#include "skip.hpp"
#include "train_runs.hpp"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

std::string torchrun_bin() { return test::venv_bin("torchrun"); }

// Runs `per_host(h)` inside each host at once (a shell line each, output to <dir>/host<h>.log) and
// returns each one's exit code.
std::vector<int> run_on_hosts(const test::HostNet& net, int hosts, const fs::path& dir,
                              const std::function<std::string(int)>& per_host) {
  std::string script;
  for (int h = 0; h < hosts; ++h) {
    const auto log = dir / ("host" + std::to_string(h) + ".log"), rc = dir / ("host" + std::to_string(h) + ".rc");
    script += "( " + net.exec(h) + per_host(h) + " > " + log.string() + " 2>&1; echo $? > " + rc.string() + " ) & ";
  }
  test::run_shell(script + "wait");
  std::vector<int> codes;
  for (int h = 0; h < hosts; ++h) {
    const auto text = test::read_file(dir / ("host" + std::to_string(h) + ".rc"));
    codes.push_back(text.empty() ? -1 : std::stoi(text));
  }
  return codes;
}

std::string host_logs(const fs::path& dir, int hosts) {
  std::string s;
  for (int h = 0; h < hosts; ++h) s += "--- host " + std::to_string(h) + "\n" + test::read_file(dir / ("host" + std::to_string(h) + ".log"));
  return s;
}

// The reference: the same tiny GPT on 4 ranks of this host.
test::TrainRun four_ranks_here(const fs::path& dir, const std::string& cfg) {
  auto run = test::train_tiny_gpt("", "launch -n 4 -- run " + cfg, dir / "one_host");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.losses.size() == 20);
  return run;
}

}  // namespace

TEST_CASE("trainer launch --nnodes 2 on two namespace hosts logs the losses of 4 ranks on one host", "[dist][e2e][netns]") {
  std::string why;
  auto net = test::HostNet::create(2, "L", &why);
  if (!net) TRAINER_SKIP(why);
  auto dir = test::scratch_dir("multinode_launch");
  const auto cfg = test::write_tiny_gpt_config(dir).string();
  const auto ref = four_ranks_here(dir, cfg);
  const auto codes = run_on_hosts(*net, 2, dir, [&](int h) {
    return std::string("\"") + TRAINER_BIN + "\" launch -n 2 --nnodes 2 --node-rank " + std::to_string(h) +
           " --master-addr " + test::HostNet::addr(0) + " --master-port 29511 -- run " + cfg + " --out-dir " +
           (dir / "two_hosts").string();
  });
  INFO(host_logs(dir, 2));
  REQUIRE(codes == std::vector<int>{0, 0});
  test::TrainRun two;
  test::read_metrics(dir / "two_hosts" / "tiny", two);
  CHECK(two.world_size == 4);
  CHECK(two.losses == ref.losses);  // bit for bit
  // rank 0 on host 0 logged; the ranks of host 1 (2 and 3) wrote their own logs in the shared run dir
  CHECK(std::regex_search(test::read_file(dir / "two_hosts/tiny/logs/rank3.log"),
                          std::regex(R"(distributed: rank 3 of 4 \(trainer launch, pid \d+\), gloo over eth0 10\.213\.0\.2 )"
                                     R"(\(routes to MASTER_ADDR 10\.213\.0\.1\))")));
}

TEST_CASE("torchrun --nnodes 2 on two namespace hosts logs the losses of 4 ranks on one host", "[dist][e2e][netns]") {
  std::string why;
  auto net = test::HostNet::create(2, "T", &why);
  if (!net) TRAINER_SKIP(why);
  const std::string torchrun = torchrun_bin();
  if (!fs::exists(torchrun)) TRAINER_SKIP("no torchrun at " << torchrun << " (set TRAINER_VENV)");
  auto dir = test::scratch_dir("multinode_torchrun");
  const auto cfg = test::write_tiny_gpt_config(dir).string();
  const auto ref = four_ranks_here(dir, cfg);
  // static rendezvous: node 0's agent hosts the store at --master_addr; the ranks connect to it
  const auto codes = run_on_hosts(*net, 2, dir, [&](int h) {
    return torchrun + " --no_python --nnodes 2 --node_rank " + std::to_string(h) + " --nproc_per_node 2 --master_addr " +
           test::HostNet::addr(0) + " --master_port 29512 \"" + TRAINER_BIN + "\" run " + cfg + " --out-dir " +
           (dir / "two_hosts").string();
  });
  INFO(host_logs(dir, 2));
  REQUIRE(codes == std::vector<int>{0, 0});
  test::TrainRun two;
  test::read_metrics(dir / "two_hosts" / "tiny", two);
  CHECK(two.world_size == 4);
  CHECK(two.losses == ref.losses);
}

TEST_CASE("trainer check on two namespace hosts prints the interface and address each rank uses", "[dist][e2e][netns]") {
  std::string why;
  auto net = test::HostNet::create(2, "C", &why);
  if (!net) TRAINER_SKIP(why);
  auto dir = test::scratch_dir("multinode_check");
  const auto cfg = test::write_tiny_gpt_config(dir).string();
  const auto codes = run_on_hosts(*net, 2, dir, [&](int h) {
    return std::string("\"") + TRAINER_BIN + "\" launch -n 2 --nnodes 2 --node-rank " + std::to_string(h) +
           " --master-addr " + test::HostNet::addr(0) + " --master-port 29513 -- check " + cfg;
  });
  const auto out = test::read_file(dir / "host0.log");
  INFO(host_logs(dir, 2));
  REQUIRE(codes == std::vector<int>{0, 0});
  CHECK(out.find("distributed: 4 ranks (trainer launch), backend gloo, store tcp://10.213.0.1:29513") != std::string::npos);
  for (int r = 0; r < 4; ++r) {
    const std::string addr = test::HostNet::addr(r / 2);
    INFO("rank " << r);
    CHECK(std::regex_search(out, std::regex("\\[rank0\\]   " + std::to_string(r) + " +" + std::to_string(r % 2) +
                                            " +\\S+ +cpu +eth0 " + std::regex_replace(addr, std::regex("\\."), "\\.") +
                                            " \\(routes to MASTER_ADDR 10\\.213\\.0\\.1\\)\n")));
  }
}

TEST_CASE("dist.interface picks the interface, and one this host lacks is a clear error", "[dist][e2e]") {
  auto dir = test::scratch_dir("dist_interface");
  const auto cfg = test::write_tiny_gpt_config(dir).string();
  auto ok = test::run_trainer("launch -n 2 -- check " + cfg + " --set dist.interface=lo");
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(ok.output.find("lo 127.0.0.1 (dist.interface)") != std::string::npos);
  auto env = test::run_trainer("launch -n 2 -- check " + cfg, "GLOO_SOCKET_IFNAME=lo");
  CHECK(env.output.find("lo 127.0.0.1 (GLOO_SOCKET_IFNAME)") != std::string::npos);
  auto bad = test::run_trainer("launch -n 2 -- run " + cfg + " --out-dir " + (dir / "runs").string() +
                               " --set dist.interface=nope0");
  INFO(bad.output);
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("dist.interface 'nope0': this host has no up interface of that name with an IPv4 address; "
                        "it has: lo 127.0.0.1") != std::string::npos);
  auto malformed = test::run_trainer("check " + cfg + " --set dist.interface=eth0/1");
  CHECK(malformed.exit_code == 2);
  CHECK(malformed.output.find("dist.interface: 'eth0/1' is not a network interface name") != std::string::npos);
}

TEST_CASE("trainer launch rejects a multi-node launch it cannot run", "[e2e]") {
  auto dir = test::scratch_dir("launch_usage");
  const auto cfg = test::write_tiny_gpt_config(dir).string();
  auto r = test::run_trainer("launch -n 2 --nnodes 2 --node-rank 2 -- run " + cfg);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("launch: --node-rank 2 is not in [0, 2)") != std::string::npos);
  auto a = test::run_trainer("launch -n 2 --nnodes 2 --master-addr '' -- run " + cfg);
  CHECK(a.exit_code == 2);
  CHECK(a.output.find("needs --master-addr") != std::string::npos);
  // none at all: 127.0.0.1 is one node's default (node 1 dialled it and timed out after 21 s)
  auto none = test::run_trainer("launch -n 1 --nnodes 2 --node-rank 1 -- run " + cfg);
  INFO(none.output);
  CHECK(none.exit_code == 2);
  CHECK(none.output.find("launch: --nnodes 2 needs --master-addr") != std::string::npos);
  // --join to a job that cannot admit it: said by the launcher, exit 2, no rank started
  auto join = test::run_trainer("launch -n 1 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --join -- run " + cfg);
  INFO(join.output);
  CHECK(join.exit_code == 2);
  CHECK(join.output.find("launch --join: the config has dist.recovery restart; a node joins a running job only under "
                         "dist.recovery: in_process") != std::string::npos);
  CHECK(join.output.find("[rank") == std::string::npos);
}

// A second SIGINT stops a rank at once (exit 130): the user's stop, yet --max-restarts started the group
// again and trained on (found from outside). Rank 0 is held (SIGSTOP) so that rank 1 waits in its step's
// collective and cannot reach the agreed stop between the two signals.
TEST_CASE("trainer launch --max-restarts does not start the group again after a rank's second SIGINT", "[dist][e2e]") {
  auto dir = test::scratch_dir("launch_no_restart_sigint");
  test::write_file(dir / "c.yaml", test::tiny_config("c", 100000, "checkpoint: {every_steps: 5}\n"));
  const auto run_dir = dir / "runs/c";
  test::start_trainer("launch -n 2 --max-restarts 1 -- run " + (dir / "c.yaml").string() + " --out-dir " +
                          (dir / "runs").string(),
                      dir / "a.log", dir / "a.rc");
  REQUIRE(test::wait_for([&] { return test::records(run_dir / "metrics.jsonl", "train").size() >= 2; }, 240));
  const pid_t rank0 = test::lock_holder(run_dir / ".lock"), rank1 = test::lock_holder(run_dir / "logs/.rank1.lock");
  REQUIRE(rank0 > 0);
  REQUIRE(rank1 > 0);
  REQUIRE(::kill(rank0, SIGSTOP) == 0);
  REQUIRE(::kill(rank1, SIGINT) == 0);
  auto logged = [&](const char* what) { return test::read_file(dir / "a.log").find(what) != std::string::npos; };
  const bool first = test::wait_for([&] { return logged("SIGINT received"); }, 60);
  if (first) ::kill(rank1, SIGINT);  // "second SIGINT, aborting without a checkpoint": exit 130
  const bool ended = test::wait_for([&] { return logged("exited with code"); }, 60);
  ::kill(rank0, SIGCONT);  // the test's own stopped process, by PID (the launcher ends it)
  const int rc = test::wait_rc(dir / "a.rc", 300);
  const auto log = test::read_file(dir / "a.log");
  INFO(log);
  REQUIRE(first);
  REQUIRE(ended);
  CHECK(log.find("launch: rank 1 exited with code 130") != std::string::npos);
  CHECK(rc == 130);
  CHECK(log.find("restarting the group") == std::string::npos);
  CHECK(test::records(run_dir / "metrics.jsonl", "attempt").size() == 1);
}

TEST_CASE("trainer launch --max-restarts starts a group with a killed rank again and the run resumes", "[dist][e2e]") {
  auto dir = test::scratch_dir("launch_restart");
  // 40 steps, a checkpoint every 5: the kill lands after one
  test::write_file(dir / "c.yaml", test::tiny_config("c", 40, "checkpoint: {every_steps: 5}\n"));
  const auto run_dir = dir / "runs/c";
  test::start_trainer("launch -n 2 --max-restarts 1 -- run " + (dir / "c.yaml").string() + " --out-dir " +
                          (dir / "runs").string(),
                      dir / "a.log", dir / "a.rc");
  REQUIRE(test::wait_for([&] { return fs::exists(run_dir / "checkpoints/latest/manifest.json"); }, 240));
  const pid_t rank1 = test::lock_holder(run_dir / "logs/.rank1.lock");
  REQUIRE(rank1 > 0);
  REQUIRE(::kill(rank1, SIGKILL) == 0);
  // the cost of a restart: from the kill to the first step the second attempt logs (docs/LAUNCHING.md)
  const auto killed_at = std::chrono::steady_clock::now();
  const bool resumed = test::wait_for([&] {
    const auto text = test::read_file(run_dir / "metrics.jsonl");
    const auto second = text.find("\"attempt\":2");
    return second != std::string::npos && text.find("\"kind\":\"train\"", second) != std::string::npos;
  }, 240);
  const double restart_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  CHECK(resumed);
  WARN("trainer launch --max-restarts: kill -9 to the first step of the restarted group " << restart_s << " s");
  const int rc = test::wait_rc(dir / "a.rc", 400);
  const auto log = test::read_file(dir / "a.log");
  INFO(log);
  CHECK(rc == 0);
  CHECK(log.find("launch: rank 1 exited with code 137; terminating the other ranks") != std::string::npos);
  CHECK(log.find("launch: restarting the group (restart 1 of 1) after exit code 137") != std::string::npos);
  // every step logged once (the steps the second attempt recomputed are not logged again), over two attempts
  const auto metrics = run_dir / "metrics.jsonl";
  CHECK(test::records(metrics, "train").size() == 40);
  CHECK(test::train_losses(metrics).size() == 40);
  CHECK(test::records(metrics, "attempt").size() == 2);
  const auto summary = test::records(metrics, "summary");
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].at("attempts") == 2);
}

// Pipeline parallel across hosts, tensor parallel within one: pp 2 x tp 2 puts ranks 0-1 (stage 0's
// tp group) on host 0 and ranks 2-3 (stage 1's) on host 1, so every activation and gradient between
// the stages crosses the bridge and every tp collective stays on a host. The losses equal the same
// layout's on one host bit for bit (the same messages, the same sums in the same order).
TEST_CASE("pp 2 x tp 2 on two namespace hosts (a stage a host) logs the losses of the same layout on one host",
          "[dist][e2e][netns][pp]") {
  std::string why;
  auto net = test::HostNet::create(2, "P", &why);
  if (!net) TRAINER_SKIP(why);
  auto dir = test::scratch_dir("multinode_pp");
  const auto cfg = test::write_tiny_gpt_config(dir).string();
  const std::string layout = " --set dist.pipeline_parallel=2 --set dist.tensor_parallel=2";
  auto ref = test::train_tiny_gpt("", "launch -n 4 -- run " + cfg + layout, dir / "one_host");
  INFO(ref.output);
  REQUIRE(ref.exit_code == 0);
  REQUIRE(ref.losses.size() == 20);
  const auto codes = run_on_hosts(*net, 2, dir, [&](int h) {
    return std::string("\"") + TRAINER_BIN + "\" launch -n 2 --nnodes 2 --node-rank " + std::to_string(h) +
           " --master-addr " + test::HostNet::addr(0) + " --master-port 29517 -- run " + cfg + layout + " --out-dir " +
           (dir / "two_hosts").string();
  });
  INFO(host_logs(dir, 2));
  REQUIRE(codes == std::vector<int>{0, 0});
  test::TrainRun two;
  test::read_metrics(dir / "two_hosts" / "tiny", two);
  CHECK(two.world_size == 4);
  CHECK(two.losses == ref.losses);  // bit for bit
  // rank 2 (stage 1, tp rank 0) ran on host 1 and trained stage 1
  const auto log2 = test::read_file(dir / "two_hosts/tiny/logs/rank2.log");
  CHECK(std::regex_search(log2, std::regex(R"(distributed: rank 2 of 4 \(trainer launch, pid \d+\), gloo over eth0 10\.213\.0\.2 )")));
  CHECK(log2.find("on pp rank 1 of 2") != std::string::npos);
}

// OpenMPI reaches the second host through its rsh launch agent: a script that runs the command
// inside the host's namespace (ip netns exec), as ssh would run it on a real node.
TEST_CASE("mpirun --host across two namespace hosts logs the losses of 4 ranks on one host", "[dist][e2e][netns]") {
  std::string why;
  auto net = test::HostNet::create(2, "M", &why);
  if (!net) TRAINER_SKIP(why);
  if (test::run_shell("command -v mpirun").exit_code != 0) TRAINER_SKIP("mpirun is not installed");
  auto dir = test::scratch_dir("multinode_mpirun");
  const auto cfg = test::write_tiny_gpt_config(dir).string();
  const auto ref = four_ranks_here(dir, cfg);
  const auto agent = dir / "agent.sh";
  test::write_file(agent, "#!/bin/sh\n# agent HOST COMMAND...: COMMAND inside the namespace HOST\nhost=$1; shift\n"
                          "exec ip netns exec \"$host\" sh -c \"$*\"\n");
  fs::permissions(agent, fs::perms::owner_all);
  const auto codes = run_on_hosts(*net, 1, dir, [&](int) {
    return "mpirun --allow-run-as-root -np 4 --host " + net->ns(0) + ":2," + net->ns(1) + ":2 --mca plm_rsh_agent " +
           agent.string() + " -x MASTER_ADDR=" + test::HostNet::addr(0) + " -x MASTER_PORT=29514 -x OMP_NUM_THREADS=1 \"" +
           TRAINER_BIN + "\" run " + cfg + " --out-dir " + (dir / "two_hosts").string();
  });
  INFO(host_logs(dir, 1));
  REQUIRE(codes == std::vector<int>{0});
  test::TrainRun two;
  test::read_metrics(dir / "two_hosts" / "tiny", two);
  CHECK(two.world_size == 4);
  CHECK(two.losses == ref.losses);
  // rank 3 ran on host 1 and says so in its own log
  CHECK(std::regex_search(test::read_file(dir / "two_hosts/tiny/logs/rank3.log"),
                          std::regex(R"(distributed: rank 3 of 4 \(openmpi, pid \d+\), gloo over eth0 10\.213\.0\.2 )"
                                     R"(\(routes to MASTER_ADDR 10\.213\.0\.1\))")));
}

// Elastic, level 1: torchrun --nnodes 1:2 with a c10d rendezvous. A host dies (every process of
// it SIGKILLed); the survivors' collectives fail, their agent starts the group again at the
// smaller world size, `trainer run` resumes from the newest checkpoint and keeps
// train.global_batch_size by accumulation (2 ranks x 2 micro-batches instead of 4 x 1).
TEST_CASE("torchrun --nnodes 1:2: losing a host continues at 2 ranks from the last checkpoint, same global batch",
          "[dist][e2e][netns]") {
  std::string why;
  auto net = test::HostNet::create(2, "E", &why);
  if (!net) TRAINER_SKIP(why);
  const std::string torchrun = torchrun_bin();
  if (!fs::exists(torchrun)) TRAINER_SKIP("no torchrun at " << torchrun << " (set TRAINER_VENV)");
  auto dir = test::scratch_dir("multinode_elastic");
  test::write_file(dir / "c.yaml",
                   "run: {name: el, out_dir: runs, seed: 3, deterministic: true}\n"
                   "model: {arch: gpt, vocab_size: 64, block_size: 16, n_layer: 2, n_head: 2, n_embd: 32}\n"
                   "data: {format: synthetic, workers: 1, synthetic: {num_samples: 4096, val_samples: 32}}\n"
                   "train: {batch_size: 8, global_batch_size: 32, max_steps: 600, log_every: 10, threads: 1}\n"
                   "optim: {name: adamw, lr: 0.003}\nlog: {progress: off}\ncheckpoint: {every_steps: 50}\n"
                   "dist: {timeout_s: 30}\n");
  for (int h = 0; h < 2; ++h) {
    const auto log = dir / ("host" + std::to_string(h) + ".log"), rc = dir / ("host" + std::to_string(h) + ".rc");
    const std::string cmd = "( " + net->exec(h) + torchrun + " --no_python --nnodes 1:2 --nproc_per_node 2 --max_restarts 3 "
                            "--rdzv_backend c10d --rdzv_endpoint " + test::HostNet::addr(0) + ":29516 --rdzv_id el "
                            "--rdzv_conf last_call_timeout=5,join_timeout=" + std::to_string(static_cast<int>(test::scaled(180))) +
                            " \"" + TRAINER_BIN + "\" run " +
                            (dir / "c.yaml").string() + " > " + log.string() + " 2>&1; echo rc=$? > " + rc.string() +
                            " ) < /dev/null > /dev/null 2>&1 &";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  const auto metrics = dir / "runs/el/metrics.jsonl";
  // the 4-rank group trains past a few checkpoints, then host 1 dies (600 steps: the 2-rank part
  // still ends within wait_rc's deadline at load 8)
  REQUIRE(test::wait_for([&] {
    auto train = test::records(metrics, "train");
    return !train.empty() && train.back().at("step").get<int64_t>() >= 150;
  }));
  net->kill_host(1);
  const int rc = test::wait_rc(dir / "host0.rc", 600);
  const auto log = test::read_file(dir / "host0.log");
  INFO(log);
  REQUIRE(rc == 0);
  CHECK(log.find("world size 4; 600 steps of 32 samples (8 per micro-batch x 1 accumulation x 4 ranks)") != std::string::npos);
  CHECK(log.find("world size 2; 600 steps of 32 samples (8 per micro-batch x 2 accumulation x 2 ranks)") != std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(log, m, std::regex("resumed from \\S+/checkpoints/step-([0-9]+) at step ([0-9]+)")));
  CHECK(std::stoi(m[1]) >= 100);  // the newest checkpoint when host 1 died
  const auto train = test::records(metrics, "train");
  CHECK(train.size() == 60);  // every 10th step, once each
  CHECK(test::train_losses(metrics).size() == 60);
  const auto summary = test::records(metrics, "summary");
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].at("attempts") == 2);
  CHECK(summary[0].at("world_size") == 2);
}

TEST_CASE("a rank advertising loopback in a job with a rank on another host is refused at once, naming both hosts",
          "[dist][e2e][netns]") {
  std::string why;
  auto net = test::HostNet::create(2, "O", &why);
  if (!net) TRAINER_SKIP(why);
  auto dir = test::scratch_dir("multinode_loopback");
  const auto cfg = test::write_tiny_gpt_config(dir).string();
  // host 0's ranks told to use lo (GLOO_SOCKET_IFNAME=lo): Gloo's connect waited 5x dist.timeout_s before
  const auto codes = run_on_hosts(*net, 2, dir, [&](int h) {
    return std::string(h == 0 ? "env GLOO_SOCKET_IFNAME=lo " : "") + "\"" + TRAINER_BIN + "\" launch -n 1 --nnodes 2 " +
           "--node-rank " + std::to_string(h) + " --master-addr " + test::HostNet::addr(0) +
           " --master-port 29514 -- check " + cfg + " --set dist.timeout_s=60";
  });
  const auto out0 = test::read_file(dir / "host0.log"), out1 = test::read_file(dir / "host1.log");
  INFO(host_logs(dir, 2));
  CHECK(codes[0] == 1);
  CHECK(codes[1] == 1);
  const std::string said = "rank 0 advertises the loopback address lo 127.0.0.1 (GLOO_SOCKET_IFNAME), but rank 1 runs "
                           "on another host (its addresses: " + test::HostNet::addr(1);
  CHECK(out0.find(said) != std::string::npos);
  CHECK(out1.find(said) != std::string::npos);  // the meeting called off: the other rank says why too
}

// Two "nodes" on this host (launch -n 1 --nnodes 2 each, on loopback) training the tiny GPT without end,
// dist.timeout_s 5: node N's output in dir/nodeN.log, its exit code in dir/nodeN.rc, the run in
// dir/out/tiny. Returns the store's port.
static std::string start_two_loopback_nodes(const std::filesystem::path& dir) {
  auto yaml = test::read_file(test::write_tiny_gpt_config(dir));
  yaml.replace(yaml.find("max_steps: 20"), 13, "max_steps: 1000000");
  yaml.replace(yaml.find("timeout_s: 60"), 13, "timeout_s: 5");
  test::write_file(dir / "long.yaml", yaml);
  const std::string port = std::to_string(dist::free_local_port());
  for (int n : {0, 1})
    test::start_trainer("launch -n 1 --nnodes 2 --node-rank " + std::to_string(n) + " --master-addr 127.0.0.1 "
                        "--master-port " + port + " -- run " + (dir / "long.yaml").string() + " --out-dir " +
                        (dir / "out").string(), dir / ("node" + std::to_string(n) + ".log"),
                        dir / ("node" + std::to_string(n) + ".rc"));
  return port;
}

// A node's launcher waits for its ranks; one that hangs (stopped) never ends, so the launcher held the
// node after the job was gone (found from outside: a SIGSTOPped rank's launcher still waited 90 s after
// the others finished). Node 0's launcher hosts the store: once it has not answered for the ranks'
// dist.timeout_s + 30 s, the other node's launcher ends its ranks. Two "nodes" on this host.
TEST_CASE("a node whose rank hangs ends it once node 0's launcher is gone for dist.timeout_s + 30 s", "[dist][e2e]") {
  auto dir = test::scratch_dir("multinode_node0_gone");
  const std::string port = start_two_loopback_nodes(dir);
  const auto run = dir / "out" / "tiny";
  pid_t rank1 = 0;
  REQUIRE(test::wait_for([&] {
    std::smatch m;
    const auto log = test::read_file(run / "logs/rank1.log");
    if (!std::regex_search(log, m, std::regex(R"(distributed: rank 1 of 2 \(trainer launch, pid (\d+)\))"))) return false;
    rank1 = static_cast<pid_t>(std::stol(m[1]));
    return !test::records(run / "metrics.jsonl", "train").empty();
  }));
  REQUIRE(::kill(rank1, SIGSTOP) == 0);  // hangs: it never ends by itself
  const pid_t rank0 = test::lock_holder(run / ".lock");
  REQUIRE(rank0 > 0);
  const auto stat = test::read_file("/proc/" + std::to_string(rank0) + "/stat");
  REQUIRE(::kill(static_cast<pid_t>(std::stol(stat.substr(stat.rfind(')') + 4))), SIGKILL) == 0);  // node 0's launcher
  const int rc = test::wait_rc(dir / "node1.rc");
  const auto log = test::read_file(dir / "node1.log");
  INFO(log);
  CHECK(rc == 1);
  CHECK(log.find("launch: node 0's launcher, which hosts the job's store at 127.0.0.1:" + port + ", has not answered "
                 "for ") != std::string::npos);
  CHECK(log.find("while ranks of this node still run: the job ended or lost node 0 without them") != std::string::npos);
}

// Node 0's launcher frozen (SIGSTOP, a hung host: its kernel still accepts connections) with its rank:
// node 1's rank timed out and ended, and node 1's launcher, asking node 0's store whether the job
// recovers in process, waited in c10d's recv() forever, deaf to SIGTERM (found from outside). Its
// store queries are bounded now: it ends with its rank's failure.
TEST_CASE("a node's launcher ends when node 0's launcher is frozen, not waiting on its store", "[dist][e2e]") {
  auto dir = test::scratch_dir("multinode_node0_frozen");
  start_two_loopback_nodes(dir);
  const auto run = dir / "out" / "tiny";
  REQUIRE(test::wait_for([&] { return !test::records(run / "metrics.jsonl", "train").empty(); }));
  const pid_t rank0 = test::lock_holder(run / ".lock");
  REQUIRE(rank0 > 0);
  const auto stat = test::read_file("/proc/" + std::to_string(rank0) + "/stat");
  const auto launcher0 = static_cast<pid_t>(std::stol(stat.substr(stat.rfind(')') + 4)));
  REQUIRE(::kill(launcher0, SIGSTOP) == 0);
  REQUIRE(::kill(rank0, SIGSTOP) == 0);
  const int rc = test::wait_rc(dir / "node1.rc", 180);
  for (pid_t p : {rank0, launcher0}) ::kill(p, SIGKILL);  // the test's own frozen processes, by PID
  const auto log = test::read_file(dir / "node1.log");
  INFO(log);
  CHECK(rc == 1);
  CHECK(log.find("launch: rank 1 exited with code 1") != std::string::npos);
}
