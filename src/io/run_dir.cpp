#include "io/run_dir.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "config/load.hpp"

namespace trainer::io {
namespace fs = std::filesystem;

namespace {
[[noreturn]] void fail(const fs::path& p, const std::string& what, int err) {
  throw std::runtime_error(p.string() + ": " + what + ": " + std::strerror(err));
}

void make_dirs(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);  // returns false without error when it already exists
  if (ec) throw std::runtime_error(p.string() + ": cannot create folder: " + ec.message());
  if (!fs::is_directory(p)) throw std::runtime_error(p.string() + ": exists and is not a folder");
}

}  // namespace

fs::path run_dir_path(const config::RunConfig& cfg) { return fs::path(cfg.run.out_dir) / cfg.run.name; }

RunDir prepare_run_dir(const config::RunConfig& cfg, int64_t rank, bool writer) {
  RunDir d{run_dir_path(cfg)};
  make_dirs(d.root);
  make_dirs(d.logs_dir());
  if (::access(d.root.c_str(), W_OK) != 0) fail(d.root, "run directory is not writable", errno);
  // locked before anything is written: a second run must not touch config.yaml, logs or checkpoints
  if (writer) {
    take_writer_locks(cfg, d);
  } else {
    d.lock = std::make_shared<RunLock>(d.logs_dir() / (".rank" + std::to_string(rank) + ".lock"),
                                       "rank " + std::to_string(rank) + "'s log in " + d.root.string());
  }
  make_dirs(d.checkpoints_dir());
  if (writer) {
    write_file_atomic(d.config_file(), config::dump_yaml(cfg));
    write_file_atomic(d.root / "config.sha256", config::config_hash(cfg) + "\n");
  }
  return d;
}

void take_writer_locks(const config::RunConfig& cfg, RunDir& d) {
  auto lock = std::make_shared<RunLock>(d.lock_file(), "run directory " + d.root.string());
  // the checkpoint folder too, its own or the run's: another run's checkpoint.dir may name this
  // run's checkpoints/ (it pruned and resumed them)
  std::shared_ptr<RunLock> checkpoint_lock;
  if (!cfg.checkpoint.dir.empty()) {
    make_dirs(cfg.checkpoint.dir);
    checkpoint_lock = std::make_shared<RunLock>(fs::path(cfg.checkpoint.dir) / ".lock", "checkpoint.dir " + cfg.checkpoint.dir);
  } else {
    make_dirs(d.checkpoints_dir());
    checkpoint_lock = std::make_shared<RunLock>(d.checkpoints_dir() / ".lock", "checkpoints of " + d.root.string());
  }
  d.log_lock = d.lock;  // a rank that became the writer keeps its log's lock too
  d.lock = std::move(lock);
  d.checkpoint_lock = std::move(checkpoint_lock);
}

}  // namespace trainer::io
