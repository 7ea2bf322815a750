// What the in-process recovery tests share (test_recovery.cpp, test_recovery_batch.cpp): the tiny GPT
// in_process config, its records, and stopping a job as a scheduler would.
#pragma once

#include <signal.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/ckpt_runs.hpp"
#include "ckpt/hardening_util.hpp"
#include "train_runs.hpp"

namespace trainer::test::recovery {
namespace fs = std::filesystem;

inline constexpr int kRecoverySteps = 60;

// The tiny GPT at 2 samples per micro-batch and 24 per step: 3 micro-batches at 4 ranks, 4 at 3,
// 6 at 2. Small buckets, so that a kill can land between two gradient buckets of one backward.
inline std::string recovery_config(const fs::path& dir, double timeout_s = 20) {
  std::string yaml = test::kTinyGptYaml;
  auto swap = [&](const std::string& a, const std::string& b) { yaml.replace(yaml.find(a), a.size(), b); };
  swap("batch_size: 8", "batch_size: 2\n  global_batch_size: 24");
  swap("max_steps: 20", "max_steps: " + std::to_string(kRecoverySteps));
  swap("timeout_s: 60", "timeout_s: " + std::to_string(timeout_s) + "\n  recovery: in_process\n  bucket_mb: 0.02");
  test::write_file(dir / "recovery.yaml", yaml);
  return (dir / "recovery.yaml").string();
}

inline std::vector<nlohmann::json> run_records(const fs::path& run_dir, const std::string& kind) {
  return test::records(run_dir / "metrics.jsonl", kind);
}

// The namespace-host tests' config: no end of its own (the test stops it with SIGTERM once it has
// seen what it waits for, so the run's length follows the host's speed), a record every 10 steps,
// dist.timeout_s 10 (a loaded host's slowest collective is far below that).
inline std::string long_config(const fs::path& dir) {
  std::string yaml = test::read_file(recovery_config(dir, /*timeout_s=*/10));
  yaml.replace(yaml.find("max_steps: 60"), 13, "max_steps: 1000000");
  yaml.replace(yaml.find("log_every: 1"), 12, "log_every: 10");
  test::write_file(dir / "long.yaml", yaml);
  return (dir / "long.yaml").string();
}

// The train records at world size `w` after the first record at another size (all when none).
inline size_t records_at_world_after_change(const std::vector<nlohmann::json>& train, int64_t w) {
  size_t n = 0;
  bool changed = false;
  for (const auto& r : train) {
    if (r.at("world_size") != w) changed = true, n = 0;
    else if (changed) ++n;
  }
  return n;
}

// Stops the job as a scheduler would: SIGTERM to host 0's launcher (the parent of rank 0, whose pid
// the run's lock names); it forwards the signal and every rank of the group saves at one step, exit 75.
inline void stop_job(const fs::path& run) {
  const pid_t rank0 = test::lock_holder(run / ".lock");
  REQUIRE(rank0 > 0);
  const auto stat = test::read_file("/proc/" + std::to_string(rank0) + "/stat");
  const pid_t launcher = static_cast<pid_t>(std::stol(stat.substr(stat.rfind(')') + 4)));
  REQUIRE(::kill(launcher, SIGTERM) == 0);
}

}  // namespace trainer::test::recovery
