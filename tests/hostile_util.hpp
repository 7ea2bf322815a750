// Helpers for hostile-input tests: FIFOs, a watchdog that turns a hang into a failure, error texts.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <string>

namespace trainer::test {

// A FIFO at `p` (replacing whatever was there); false when the filesystem cannot hold one.
inline bool make_fifo(const std::filesystem::path& p) {
  std::filesystem::remove(p);
  std::filesystem::create_directories(p.parent_path());
  return ::mkfifo(p.c_str(), 0644) == 0;
}

// The what() of the std::exception `f` throws ("" when it returns). If `f` has not finished after
// `seconds` (it blocks on a FIFO or reads a device forever) the process reports it and exits 1:
// the blocked thread cannot be cancelled, and a failing test beats a hanging one.
inline std::string error_within(double seconds, const std::function<void()>& f, const char* what = "") {
  auto fut = std::async(std::launch::async, [f]() -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  });
  if (fut.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: still running after %.0f s (blocked on a FIFO or reading a device?): %s\n", seconds,
                 what);
    std::fflush(stderr);
    std::_Exit(1);
  }
  return fut.get();
}

inline bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace trainer::test
