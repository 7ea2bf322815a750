#include "config/file_read.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace trainer {

std::string file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

FolderCheck check_folder(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    if (S_ISREG(st.st_mode)) return {FolderCheck::File, ""};
    return {FolderCheck::Other, file_kind(st.st_mode)};
  }
  const int err = errno;
  if (err == ELOOP) return {FolderCheck::LinkLoop, std::strerror(err)};
  struct stat lst {};
  if (err == ENOENT && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    std::string target(4096, '\0');
    const auto n = ::readlink(path.c_str(), target.data(), target.size());
    target.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return {FolderCheck::DanglingLink, target};
  }
  if (err == ENOENT || err == ENOTDIR) return {FolderCheck::Missing, ""};
  return {FolderCheck::Unreadable, std::strerror(err)};
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (n < 1024) return std::to_string(n) + " bytes";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string RegularFile::open_impl(const std::string& path, uint64_t max_bytes, const char* what) {
  path_ = path;
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) return std::string("cannot open: ") + std::strerror(errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return std::string("cannot stat: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode))
    return "is " + file_kind(st.st_mode) + ", not a regular file (refusing to read it: it may block or never end)";
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > max_bytes)
    return "is " + human_bytes(size_) + ", more than the " + human_bytes(max_bytes) + " " + what + " may have";
  return "";
}

std::string RegularFile::read_at(void* dst, uint64_t n, uint64_t offset) const {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::string("cannot read: ") + std::strerror(errno);
    if (got == 0) return "the file ended early (it shrank while being read?)";
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return "";
}

std::string RegularFile::read_all_impl(std::string& out) const {
  out.assign(size_, '\0');
  std::string why = read_at(out.data(), size_, 0);
  if (!why.empty()) return why;
  char extra;  // a file that grew after fstat: say so rather than return a silent prefix
  ssize_t more;
  do more = ::pread(fd_, &extra, 1, static_cast<off_t>(size_));
  while (more < 0 && errno == EINTR);
  if (more > 0) return "the file grew while being read";
  return "";
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

RegularFile::RegularFile(RegularFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), size_(o.size_), path_(std::move(o.path_)) {}

RegularFile& RegularFile::operator=(RegularFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = o.size_;
    path_ = std::move(o.path_);
  }
  return *this;
}

}  // namespace trainer
