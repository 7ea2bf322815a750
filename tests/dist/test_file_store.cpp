// dist.store file://: a file left by a crashed job must not break the next job (issue 18, 8b).
// The crashed job is two worker processes that meet in the file and die without cleaning up.
#include <catch2/catch.hpp>

#include "dist/dist_context.hpp"
#include "spawn.hpp"
#include "train_runs.hpp"

using namespace trainer;
using Catch::Matchers::Contains;

namespace {

// Two ranks of a job that meets in `store` and is killed after its first collective: the file keeps
// its sign-ins and Gloo's addresses of processes that no longer exist.
void crash_a_job(const std::filesystem::path& dir, const std::filesystem::path& store, int port) {
  std::vector<test::Proc> procs;
  for (int r = 0; r < 2; ++r)
    procs.push_back(test::spawn_self("worker: crash after rendezvous",
                                     {{"RANK", std::to_string(r)}, {"LOCAL_RANK", std::to_string(r)},
                                      {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                                      {"MASTER_PORT", std::to_string(port)}, {"TRAINER_STORE_FILE", store.string()}},
                                     dir / ("crashed_rank" + std::to_string(r) + ".log")));
  for (auto& p : procs) {
    test::wait_proc(p, 60);
    INFO(p.output());
    REQUIRE(p.exit_code == 9);
  }
  REQUIRE(std::filesystem::exists(store));
}

}  // namespace

TEST_CASE("worker: crash after rendezvous", "[.worker]") {
  if (!test::is_worker()) return;
  config::DistConfig cfg;
  cfg.timeout_s = 20;
  cfg.store = std::string("file://") + std::getenv("TRAINER_STORE_FILE");
  auto ctx = dist::DistContext::create(dist::detect_launch_env(), cfg, torch::Device(torch::kCPU), "h");
  ctx->barrier();
  std::fflush(nullptr);
  std::_Exit(9);  // no destructors: the store file stays as a killed job leaves it
}

TEST_CASE("a dist.store file left by a crashed job does not break the next job", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("file_store_stale");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  // The next job's ranks start apart, one of them first: formerly it read the dead job's Gloo
  // address of its peer from the file and failed with "Connection refused". Either rank may be
  // the one that connects, so each goes first once.
  for (int late : {0, 1}) {
    INFO("rank " << late << " starts 3 s after the other");
    auto store = dir / ("rendezvous" + std::to_string(late));
    crash_a_job(dir, store, dist::free_local_port());
    const std::string base = "env OMP_NUM_THREADS=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                             std::to_string(dist::free_local_port());
    auto rank_cmd = [&](int r) {
      return base + " RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) + " " + test::timeout_prefix(300) +
             " \"" TRAINER_BIN "\" run " + cfg + " --set train.max_steps=3 --set dist.store=file://" + store.string() +
             " --out-dir " +
             (dir / ("out" + std::to_string(late))).string();
    };
    auto r = test::run_shell(rank_cmd(1 - late) + " & first=$!; sleep 3; " + rank_cmd(late) +
                             "; second=$?; wait $first; first=$?; echo \"exit codes $first $second\"; "
                             "[ $first -eq 0 ] && [ $second -eq 0 ]");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    test::TrainRun run;
    test::read_metrics(dir / ("out" + std::to_string(late)) / "tiny", run);
    CHECK(run.losses.size() == 3);
    CHECK(run.world_size == 2);
  }
}

TEST_CASE("a stale dist.store file of a job started the same way is detected and named", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("file_store_same_job");
  auto store = dir / "rendezvous";
  const int port = dist::free_local_port();
  crash_a_job(dir, store, port);
  auto cfg = test::write_tiny_gpt_config(dir).string();
  // the same rendezvous port: nothing tells this job from the crashed one but the sign-ins
  auto r = test::run_shell(test::timeout_prefix(300) + " \"" TRAINER_BIN "\" launch -n 2 --master-port " + std::to_string(port) +
                           " -- run " + cfg + " --set dist.store=file://" + store.string() + " --out-dir " +
                           (dir / "out").string());
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);  // not a hang
  CHECK_THAT(r.output, Contains("of this job is already registered in it (host ") &&
                           Contains("the file was left by an earlier job that did not finish") &&
                           Contains("delete " + store.string() + " (no job may be using it)"));
}
