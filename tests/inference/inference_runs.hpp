// Shared by the eval / predict tests: short training runs through the trainer binary, and the last
// JSON line of a command's output.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace trainer::test {

// Writes `yaml` as dir/exp.yaml and trains it; the run directory is dir/runs/<name>.
inline void train_config(const std::filesystem::path& dir, const std::string& yaml) {
  write_file(dir / "exp.yaml", yaml);
  auto r = run_trainer("run " + (dir / "exp.yaml").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
}

// The output's lines that are JSON objects, in order (after the "[rank<k>] " `trainer launch` puts
// before each line of its ranks).
inline std::vector<nlohmann::json> json_lines(const std::string& output) {
  std::vector<nlohmann::json> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[rank", 0) == 0 && line.find("] ") != std::string::npos) line = line.substr(line.find("] ") + 2);
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(j);
  }
  return out;
}

}  // namespace trainer::test
