// Shared by the hardening tests: a run started in the background, waiting for files, re-signing a
// checkpoint's manifest after a test edited it (so that only the edit, not a checksum, is wrong).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "config/sha256.hpp"
#include "test_util.hpp"

namespace trainer::test {

// Polls `done` every 50 ms for up to `seconds`; true once it holds.
inline bool wait_for(const std::function<bool()>& done, double seconds = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// `trainer ARGS` in the background; its output goes to `log`, and "rc=<exit code>" to `rc_file` when
// it ends.
inline void start_trainer(const std::string& args, const std::filesystem::path& log, const std::filesystem::path& rc_file,
                          const std::string& env = "") {
  const std::string cmd = "( " + env + (env.empty() ? "" : " ") + "\"" + TRAINER_BIN + "\" " + args + " > \"" +
                          log.string() + "\" 2>&1; echo rc=$? > \"" + rc_file.string() + "\" ) < /dev/null > /dev/null 2>&1 &";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

// The exit code written by start_trainer's command, waiting for it (-1 on time-out).
inline int wait_rc(const std::filesystem::path& rc_file, double seconds = 120) {
  if (!wait_for([&] { return read_file(rc_file).find('\n') != std::string::npos; }, seconds)) return -1;
  return std::stoi(read_file(rc_file).substr(3));
}

// The pid a run's lock file names ("pid 123 on host ..."), or 0.
inline pid_t lock_holder(const std::filesystem::path& lock) {
  const std::string s = read_file(lock);
  if (s.rfind("pid ", 0) != 0) return 0;
  return static_cast<pid_t>(std::stol(s.substr(4)));
}

// Recomputes the checksums of every file a manifest lists and its own checksum, as a save would:
// the checkpoint verifies again after a test changed a file on purpose.
inline void resign_manifest(const std::filesystem::path& step_dir) {
  const auto path = step_dir / "manifest.json";
  auto m = nlohmann::json::parse(read_file(path));
  for (auto& [name, entry] : m["files"].items()) {
    entry["sha256"] = trainer::sha256_hex(read_file(step_dir / name));
    entry["bytes"] = static_cast<int64_t>(std::filesystem::file_size(step_dir / name));
  }
  m.erase("self_sha256");
  m["self_sha256"] = trainer::sha256_hex(m.dump());
  write_file(path, m.dump(1));
}

}  // namespace trainer::test
