#include "dist/launch_output.hpp"

#include <unistd.h>

#include <cerrno>

namespace trainer::dist {

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

bool Stream::pump() {
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      if (!pending.empty()) write_all(out_fd, prefix + pending + "\n");
      pending.clear();
      ::close(fd);
      fd = -1;
      return false;
    }
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    std::string lines;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      lines += prefix + pending.substr(start, nl - start + 1);
      start = nl + 1;
    }
    pending.erase(0, start);
    if (!lines.empty()) write_all(out_fd, lines);  // whole lines at once: ranks do not interleave mid-line
  }
}

}  // namespace trainer::dist
