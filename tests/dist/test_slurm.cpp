// SLURM for real: a one-node cluster on loopback (slurm_cluster.hpp) runs scripts/launch/slurm.sbatch
// with 2 tasks; `scancel --signal=USR1` mid-run must end in a saved checkpoint, exit 75, a requeue,
// a resume from that checkpoint and a completed job, with every step logged once.
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <string>

#include "ckpt/ckpt_runs.hpp"
#include "ckpt/hardening_util.hpp"
#include "skip.hpp"
#include "slurm_cluster.hpp"
#include "train_runs.hpp"

using namespace trainer;
namespace fs = std::filesystem;

TEST_CASE("slurm.sbatch: USR1 saves a checkpoint, exits 75, requeues, resumes and completes", "[dist][e2e][slurm][slow]") {
  auto dir = test::scratch_dir("slurm_requeue");
  std::string why;
  auto cluster = test::SlurmCluster::start(dir / "cluster", &why);
  if (!cluster) TRAINER_SKIP(why);
  const auto job_dir = dir / "job";
  fs::create_directories(job_dir);
  test::write_file(job_dir / "c.yaml", test::tiny_config("s", 3000, "checkpoint: {every_steps: 1000}\n"));
  // from the job folder, as a user would: the output lands there as trainer-<id>.out
  auto sub = cluster->run("cd " + job_dir.string() + " && TRAINER=" + TRAINER_BIN +
                          " OMP_NUM_THREADS=1 sbatch --parsable --nodes=1 --ntasks=2 " +
                          test::source_path("scripts/launch/slurm.sbatch") + " c.yaml");
  INFO(sub.output);
  REQUIRE(sub.exit_code == 0);
  const std::string id = sub.output.substr(0, sub.output.find_first_of(";\n"));
  const auto metrics = job_dir / "runs/s/metrics.jsonl";
  REQUIRE(test::wait_for([&] { return fs::exists(metrics) && test::records(metrics, "train").size() >= 5; }, 120));
  REQUIRE(cluster->run("scancel --signal=USR1 " + id).exit_code == 0);
  // requeued: the job waits for its begin time, cred_expire after the requeue (20 s in the test
  // cluster's slurm.conf; slurmd refuses an earlier start: "Job credential revoked"), then runs again
  REQUIRE(test::wait_for([&] { return cluster->job_field(id, "Restarts") == "1"; }, 60));
  REQUIRE(test::wait_for([&] { return cluster->job_field(id, "JobState") == "COMPLETED"; }, 300));
  const auto out = test::read_file(job_dir / ("trainer-" + id + ".out"));
  INFO(out);
  std::smatch m;
  REQUIRE(std::regex_search(out, m, std::regex("SIGUSR1 received: saving a checkpoint at step ([0-9]+) and exiting with code 75")));
  const std::string step = m[1];
  CHECK(out.find("checkpoints/step-" + step) != std::string::npos);
  CHECK(out.find("resumed from " + (job_dir / "runs/s/checkpoints/step-").string() + step + " at step " + step) !=
        std::string::npos);
  CHECK(cluster->job_field(id, "ExitCode") == "0:0");
  CHECK(test::records(metrics, "train").size() == 3000);  // every step once (tiny_config logs each step)
  const auto summary = test::records(metrics, "summary");
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].at("attempts") == 2);
  CHECK(summary[0].at("steps") == 3000);
}

// Pipeline and 3-D through the batch script: 4 tasks (srun, ranks from SLURM_PROCID; --overcommit:
// the test cluster has as many CPUs as the machine) at pp 2 x tp 2 log one process's losses.
TEST_CASE("slurm.sbatch: pp 2 x tp 2 over 4 tasks logs one process's losses", "[dist][e2e][slurm][pp]") {
  auto dir = test::scratch_dir("slurm_pp");
  std::string why;
  auto cluster = test::SlurmCluster::start(dir / "cluster", &why);
  if (!cluster) TRAINER_SKIP(why);
  auto cfg = test::write_tiny_gpt_config(dir);
  const std::string steps = " --set train.max_steps=10 --set model.n_head=4";
  auto single = test::train_tiny_gpt("", "run " + cfg.string() + steps, dir / "single");
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  REQUIRE(single.losses.size() == 10);
  const auto job_dir = dir / "job";
  fs::create_directories(job_dir);
  auto sub = cluster->run("cd " + job_dir.string() + " && TRAINER=" + TRAINER_BIN +
                          " OMP_NUM_THREADS=1 sbatch --parsable --nodes=1 --ntasks=4 --overcommit " +
                          test::source_path("scripts/launch/slurm.sbatch") + " " + cfg.string() + steps +
                          " --set dist.pipeline_parallel=2 --set dist.tensor_parallel=2 --out-dir " +
                          (job_dir / "runs").string());
  INFO(sub.output);
  REQUIRE(sub.exit_code == 0);
  const std::string id = sub.output.substr(0, sub.output.find_first_of(";\n"));
  REQUIRE(test::wait_for([&] {
    const auto state = cluster->job_field(id, "JobState");
    return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" || state == "TIMEOUT";
  }, 300));
  const auto out = test::read_file(job_dir / ("trainer-" + id + ".out"));
  INFO(out);
  REQUIRE(cluster->job_field(id, "JobState") == "COMPLETED");
  CHECK(out.find("pipeline parallel 2") != std::string::npos);
  test::TrainRun pp;
  test::read_metrics(job_dir / "runs" / "tiny", pp);
  REQUIRE(pp.losses.size() == 10);
  CHECK(pp.world_size == 4);
  for (size_t i = 0; i < 10; ++i) {
    INFO("step " << i + 1 << ": " << single.losses[i] << " vs " << pp.losses[i]);
    CHECK(std::abs(single.losses[i] - pp.losses[i]) <= 1e-6 * single.losses[i]);
  }
}

TEST_CASE("slurm.sbatch without a trainer binary says how to give one", "[e2e][slurm]") {
  auto dir = test::scratch_dir("slurm_no_trainer");
  auto r = test::run_shell("cd " + dir.string() + " && PATH=/usr/bin:/bin TRAINER= bash " +
                           test::source_path("scripts/launch/slurm.sbatch") + " c.yaml");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("slurm.sbatch: no trainer binary: set TRAINER=/path/to/build/trainer") != std::string::npos);
}
