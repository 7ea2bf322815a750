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

void fsync_path(const fs::path& p, int flags) {
  int fd = ::open(p.c_str(), flags);
  if (fd < 0) fail(p, "cannot open for fsync", errno);
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    fail(p, "fsync failed", e);
  }
  ::close(fd);
}
}  // namespace

fs::path run_dir_path(const config::RunConfig& cfg) { return fs::path(cfg.run.out_dir) / cfg.run.name; }

void write_file_atomic(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "cannot create", errno);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(tmp, "write failed", e);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail(tmp, "fsync/close failed", e);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail(path, "rename failed", e);
  }
  fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path(), O_RDONLY | O_DIRECTORY);
}

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
