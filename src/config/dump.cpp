// RunConfig -> YAML text, every key in schema order, values written so they read back exactly.
#include "config/load.hpp"
#include "config/schema.hpp"
#include "config/sha256.hpp"

namespace trainer::config {

std::string dump_yaml(const RunConfig& cfg) {
  RunConfig copy = cfg;
  std::string out = kDumpHeader;
  std::vector<std::string> open;  // the group path currently written, e.g. {"data", "augment"}
  for (const auto& f : describe_fields(copy)) {
    std::vector<std::string> parts;
    for (size_t b = 0, e; b <= f.key.size(); b = e + 1) {
      e = f.key.find('.', b);
      if (e == std::string::npos) e = f.key.size();
      parts.push_back(f.key.substr(b, e - b));
    }
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    open.resize(common);
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      out += std::string(2 * i, ' ') + parts[i] + ":\n";
      open.push_back(parts[i]);
    }
    out += std::string(2 * (parts.size() - 1), ' ') + parts.back() + ": " + value_text(f) + "\n";
  }
  return out;
}

std::string config_hash(const RunConfig& cfg) { return sha256_hex(dump_yaml(cfg)); }

}  // namespace trainer::config
