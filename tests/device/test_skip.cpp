// The skip exit code (tests/skip.hpp): this program run on its own [gpu] case exits 77 without a GPU,
// so ctest (SKIP_RETURN_CODE 77) shows the case as skipped, and 0 where a GPU ran it; a run that
// also holds a case that really ran exits 0.
#include <catch2/catch.hpp>

#include <torch/cuda.h>

#include "test_util.hpp"
#include <fmt/format.h>

namespace {

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

}  // namespace

TEST_CASE("a GPU-only case run alone without a GPU exits 77: ctest reports it skipped", "[unit]") {
  const std::string gpu_case = "*NVML reports a utilisation between 0 and 100*";
  const std::string unit_case = "NVML bus ids are domain:bus:device.0 in upper-case hex";
  // fmt::format, not "'" + string: GCC 12's -Wstringop-overflow false positive on literal + std::string
  auto alone = trainer::test::run_shell(fmt::format("'{}' '{}'", self_exe(), gpu_case));
  INFO(alone.output);
  CHECK(alone.exit_code == (torch::cuda::is_available() ? 0 : 77));
  if (!torch::cuda::is_available()) CHECK(alone.output.find("skipped: no CUDA device") != std::string::npos);
  auto mixed = trainer::test::run_shell(fmt::format("'{}' '{},{}'", self_exe(), gpu_case, unit_case));
  INFO(mixed.output);
  CHECK(mixed.exit_code == 0);
  CHECK(mixed.output.find("2 test cases") != std::string::npos);
}
