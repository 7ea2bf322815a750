#include "obs/memory.hpp"

#include <fstream>
#include <sstream>

namespace trainer::obs {

std::optional<HostMemory> parse_proc_status(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::optional<double> rss, hwm;
  while (std::getline(in, line)) {
    // lines look like "VmRSS:\t  123456 kB"
    auto field = [&](const char* name) -> std::optional<double> {
      if (line.rfind(name, 0) != 0) return std::nullopt;
      std::istringstream v(line.substr(std::string(name).size()));
      double kb = 0;
      std::string unit;
      if (!(v >> kb >> unit) || unit != "kB") return std::nullopt;
      return kb / 1024.0;
    };
    if (auto v = field("VmRSS:")) rss = v;
    if (auto v = field("VmHWM:")) hwm = v;
  }
  if (!rss || !hwm) return std::nullopt;
  return HostMemory{*rss, *hwm};
}

std::optional<HostMemory> host_memory() {
  std::ifstream f("/proc/self/status");
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_proc_status(ss.str());
}

}  // namespace trainer::obs
