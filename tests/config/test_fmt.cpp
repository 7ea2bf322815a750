// The one fmt arrangement (docs/ARCHITECTURE.md, Build): our code sees Debian's fmt 9, the one
// libspdlog and libfmt.so.9 were built with, even though torch's include folder carries fmt 12.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <sstream>

static_assert(FMT_VERSION / 10000 == 9, "our code must compile against the system fmt 9, not torch's bundled fmt");

TEST_CASE("fmt and spdlog format through the system fmt next to torch", "[unit]") {
  REQUIRE(fmt::format("{:.3f} {}", 1.23456, std::string("x")) == "1.235 x");
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("fmt-test", sink);
  logger.set_pattern("%v");
  auto t = torch::ones({2, 3});
  logger.info("numel {} sum {:.1f}", t.numel(), t.sum().item<double>());
  REQUIRE(out.str() == "numel 6 sum 6.0\n");
}

TEST_CASE("std::filesystem calls resolve to the system libstdc++, not libtorch's copy", "[unit]") {
  // libtorch.so exports a std::filesystem whose remove_all crashed before the link-order fix
  auto dir = std::filesystem::temp_directory_path() / ("trainer-fs-test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "a" / "b");
  REQUIRE(std::filesystem::remove_all(dir) == 3);
}
