#include "io/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace trainer::io {
namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

// The holder line a lock file carries: "pid 123 on host node1 since 2026-12-01T08:00:00Z".
std::string holder_text() {
  char when[32] = {0};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return "pid " + std::to_string(::getpid()) + " on host " + host_name() + " since " + when;
}

// The first line of the lock file (bounded: the file is ours, but anyone can write into it).
std::string read_holder(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  s = s.substr(0, s.find('\n'));
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return s;
}

[[noreturn]] void lock_fail(const std::filesystem::path& p, const std::string& what, int err) {
  throw std::runtime_error(p.string() + ": " + what + ": " + std::strerror(err));
}

}  // namespace

RunLock::RunLock(const std::filesystem::path& file, const std::string& what) : file_(file) {
  // O_NOFOLLOW: a link planted in place of the lock file is not followed; O_NONBLOCK: never a FIFO wait
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0) lock_fail(file, "cannot open the lock file", errno);
  struct stat st{};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw std::runtime_error(file.string() + ": the lock file is not a regular file; remove it");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? read_holder(fd_) : "";
    ::close(fd_);
    if (err != EWOULDBLOCK) lock_fail(file, "cannot lock", err);
    throw RunDirBusy(what + " is in use by another trainer run (" + (holder.empty() ? "holder unknown" : holder) +
                     "; lock " + file.string() + "): wait for it to end, stop it, or choose another " +
                     (what.rfind("checkpoint", 0) == 0 ? "checkpoint.dir" : "run.name"));
  }
  recovered_ = read_holder(fd_);  // a lock file we could lock was left by a process that is gone
  const std::string text = holder_text() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    ::close(fd_);
    lock_fail(file, "cannot write the lock file", err);
  }
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  // the file stays (unlinking would race with a process that opened it and waits to lock it);
  // emptying it says "no holder"
  [[maybe_unused]] int rc = ::ftruncate(fd_, 0);
  ::close(fd_);
}

}  // namespace trainer::io
