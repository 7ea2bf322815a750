// Skipped test cases. Catch2 v2 has no SKIP: a case that cannot run here (a [gpu] case without a CUDA
// device) calls TRAINER_SKIP(reason), which notes it and returns. The test programs' main
// (tests/catch_main.cpp) exits with kSkipExitCode when every case it ran skipped itself; ctest runs
// one case per process and registers every case with SKIP_RETURN_CODE kSkipExitCode, so its summary
// counts such a case as skipped ("Not Run"), not as passed. A run of several cases where some ran
// exits as usual (0 when all passed), so `test_engine '[gpu]'` on a GPU machine is unaffected.
#pragma once

namespace trainer::test {

constexpr int kSkipExitCode = 77;  // also the Python interop tests' skip code (tests/CMakeLists.txt)

// Set by TRAINER_SKIP inside the running case, read and cleared by catch_main.cpp's listener.
inline bool& current_case_skipped() {
  static bool skipped = false;
  return skipped;
}

}  // namespace trainer::test

#define TRAINER_SKIP(reason)                                 \
  do {                                                       \
    WARN("skipped: " << reason);                             \
    ::trainer::test::current_case_skipped() = true;          \
    return;                                                  \
  } while (0)
