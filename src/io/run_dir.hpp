// The run directory <out_dir>/<run.name>/: config.yaml (+ its hash), metrics.jsonl, logs/, checkpoints/.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/file_write.hpp"
#include "io/run_lock.hpp"

namespace trainer::io {

struct RunDir {
  std::filesystem::path root;
  std::filesystem::path config_file() const { return root / "config.yaml"; }
  std::filesystem::path metrics_file() const { return root / "metrics.jsonl"; }
  std::filesystem::path logs_dir() const { return root / "logs"; }
  std::filesystem::path rank_log(int64_t rank) const { return logs_dir() / ("rank" + std::to_string(rank) + ".log"); }
  std::filesystem::path checkpoints_dir() const { return root / "checkpoints"; }
  std::filesystem::path lock_file() const { return root / ".lock"; }
  // held for the whole run: rank 0 locks the run directory (and checkpoint.dir when it is set),
  // every other rank its own log (logs/.rank<N>.lock)
  std::shared_ptr<RunLock> lock, checkpoint_lock;
  std::shared_ptr<RunLock> log_lock;  // a rank that became the writer mid-run: its own log's, still held
  std::vector<std::string> set_aside;  // start_over: the folders the earlier run's files were moved into
};

std::filesystem::path run_dir_path(const config::RunConfig& cfg);

// Creates the folders (idempotent, safe when every rank calls it at once) and takes the run's locks
// (RunDirBusy when another run holds one) before anything is written. The writer (rank 0 of a run's
// start; dist/launch_env.hpp writes_run_files) locks the run directory (and checkpoint.dir) and writes
// config.yaml and config.sha256 atomically; any other process, a replacement rank that joins a
// running group included, locks its own log (logs/.rank<rank>.lock). Throws std::runtime_error
// naming the path and errno text. `start_over` (--resume never): the writer first moves an earlier
// run's records (metrics.jsonl, config.yaml and its hash, autotune.json, init_report.json, tb/,
// profile/) into <run dir>/superseded-<UTC time>/ and its checkpoints into checkpoints/ there (an
// external checkpoint.dir: into superseded-<UTC time>/ in it), the folders in `set_aside`.
RunDir prepare_run_dir(const config::RunConfig& cfg, int64_t rank, bool writer, bool start_over = false);

// The writer's locks (the run directory's, checkpoint.dir's), taken by a rank that becomes the
// writer mid-run (dist.recovery in_process, rank 0 lost): `dir`'s lock and checkpoint_lock become
// them, its own log lock is kept. Throws RunDirBusy when another process holds one.
void take_writer_locks(const config::RunConfig& cfg, RunDir& dir);

using ::trainer::write_file_atomic;  // config/file_write.hpp (the commands below io write with it too)

}  // namespace trainer::io
