// Memory probes: host resident set size of this process, CUDA caching-allocator figures.
#pragma once

#include <optional>
#include <string>

namespace trainer::obs {

struct HostMemory {
  double rss_mb = 0;       // VmRSS: resident now
  double peak_rss_mb = 0;  // VmHWM: high-water mark of the resident set
};

// From /proc/self/status; nullopt where it cannot be read (not Linux), so nothing unmeasured is logged.
std::optional<HostMemory> host_memory();
// Parses the text of a /proc/<pid>/status file (exposed for tests).
std::optional<HostMemory> parse_proc_status(const std::string& text);

}  // namespace trainer::obs
