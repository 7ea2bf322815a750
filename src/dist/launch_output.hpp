// `trainer launch`'s output: what each rank writes, line by line with its "[rankN] " prefix, and the
// launcher's own lines, each written whole so that ranks never interleave mid-line.
#pragma once

#include <string>

namespace trainer::dist {

// Writes all of `s` to `fd` (retried on EINTR; a closed terminal ends it quietly).
void write_all(int fd, const std::string& s);

struct Stream {
  int fd = -1;      // read end of the rank's stdout or stderr pipe
  int out_fd = 1;   // where its lines go (ours)
  std::string prefix;
  std::string pending;  // a line not yet ended

  // Reads what is there; writes every complete line with the prefix. Returns false at EOF.
  bool pump();
};

}  // namespace trainer::dist
