// An exclusive lock on a run directory (or a shared checkpoint folder): two `trainer run` processes
// writing one run directory would interleave checkpoints and metrics and resume from each other's
// state. The lock is flock(2) on a small file that also names the holder (host, pid, start time),
// so a second run is refused with who holds it. The kernel drops the lock when its holder dies
// (kill -9 included): a lock file left behind is stale by construction and taken over safely.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

namespace trainer::io {

// Thrown when another live process holds the lock; the message names it and the lock file.
class RunDirBusy : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RunLock {
 public:
  // Takes the lock on `file` (created if missing) without waiting. `what` names the guarded folder
  // in messages ("run directory runs/a"). Throws RunDirBusy when another process holds it and
  // std::runtime_error naming the file for any other failure.
  RunLock(const std::filesystem::path& file, const std::string& what);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::filesystem::path& file() const { return file_; }
  // The previous holder's description when the lock file was left by a process that is gone, else "".
  const std::string& recovered_from() const { return recovered_; }

 private:
  std::filesystem::path file_;
  int fd_ = -1;
  std::string recovered_;
};

}  // namespace trainer::io
