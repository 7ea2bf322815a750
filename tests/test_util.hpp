// Helpers shared by the tests: scratch folders, running the trainer binary, reading files.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace trainer::test {

// A fresh, empty folder under the build tree for one test.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto p = std::filesystem::path(TRAINER_TEST_TMP) / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

inline void write_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `trainer ARGS` through the shell, capturing its output and exit code.
inline CommandResult run_trainer(const std::string& args, const std::string& env = "") {
  std::string cmd = env + (env.empty() ? "" : " ") + std::string("\"") + TRAINER_BIN + "\" " + args + " 2>&1";
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline std::string source_path(const std::string& rel) { return std::string(TRAINER_SOURCE_DIR) + "/" + rel; }

}  // namespace trainer::test
