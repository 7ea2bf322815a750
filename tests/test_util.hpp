// Helpers shared by the tests: scratch folders, running the trainer binary, reading files.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace trainer::test {

// The scratch folder `name` of this test process. The pid keeps it private: ctest runs test cases
// in parallel, each in its own process, and cases in one file often share a name.
// A process started by another test (a Python interop test running one fixture case) is given the
// parent folder in TRAINER_SCRATCH_DIR and then uses plain `name` under it.
inline std::filesystem::path scratch_path(const std::string& name) {
  if (const char* parent = std::getenv("TRAINER_SCRATCH_DIR"); parent && *parent)
    return std::filesystem::path(parent) / name;
  return std::filesystem::path(TRAINER_TEST_TMP) / (name + "." + std::to_string(::getpid()));
}

// A fresh, empty scratch folder (see scratch_path) under the build tree for one test.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto p = scratch_path(name);
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

// Runs a shell command line, capturing stdout and stderr together, and its exit code.
inline CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen(("{ " + cmd + "\n} 2>&1").c_str(), "r");  // stderr of every command of the line
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Runs `trainer ARGS` through the shell (after `env`: variables or a wrapper like `timeout 5`).
inline CommandResult run_trainer(const std::string& args, const std::string& env = "") {
  return run_shell(env + (env.empty() ? "" : " ") + std::string("\"") + TRAINER_BIN + "\" " + args);
}

// Every deadline of a test (a wait for a file, a record, a log line or a process; a `timeout`
// wrapped around a command) is generous for this project's 2-core host at load 8, the CPU-hog mode
// of `scripts/test.sh --stress` included. TRAINER_TEST_TIMEOUT_SCALE (a positive number, default 1)
// multiplies them all for a slower machine (an emulator, a debug or sanitizer build); test.sh
// scales ctest's per-test limit by the same factor. Deadlines only: no test waits a fixed time.
inline double timeout_scale() {
  static const double scale = [] {
    const char* s = std::getenv("TRAINER_TEST_TIMEOUT_SCALE");
    if (!s || !*s) return 1.0;
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (*end != '\0' || !(v > 0)) {
      std::fprintf(stderr, "TRAINER_TEST_TIMEOUT_SCALE=%s is not a positive number\n", s);
      std::exit(2);
    }
    return v;
  }();
  return scale;
}

// `seconds` of deadline, scaled (see timeout_scale).
inline double scaled(double seconds) { return seconds * timeout_scale(); }

// Polls `done` every 50 ms for up to `seconds` (scaled); true once it holds. The one way a test
// waits for something (a file, a record, a log line, a process gone).
inline bool wait_for(const std::function<bool()>& done, double seconds = 180) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(scaled(seconds));
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// `timeout -s SIG Ns` for run_trainer's `env`, N scaled: a limit on a command that must end by
// itself (a hang is the failure), never a way to stop one at a chosen moment.
inline std::string timeout_prefix(double seconds, const std::string& sig = "TERM") {
  return "timeout -s " + sig + " " + std::to_string(scaled(seconds)) + "s";
}

inline std::string source_path(const std::string& rel) { return std::string(TRAINER_SOURCE_DIR) + "/" + rel; }

// A program of the project's Python environment (scripts/setup.sh; $TRAINER_VENV overrides): python,
// torchrun. Tests that need one skip when it is missing.
inline std::string venv_bin(const std::string& name) {
  const char* venv = std::getenv("TRAINER_VENV");
  const char* home = std::getenv("HOME");
  return (venv ? std::string(venv) : std::string(home ? home : "/root") + "/.cache/trainer/venv-torch-2.11.0") +
         "/bin/" + name;
}

}  // namespace trainer::test
