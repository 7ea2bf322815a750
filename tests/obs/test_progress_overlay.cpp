// The progress bar and the console: drawn only where a person watches, cleared before every log line.
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>

#include "obs/logging.hpp"
#include "obs/progress.hpp"

using namespace trainer::obs;

namespace {

GetEnvFn env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string contents_of(FILE* f) {
  std::fflush(f);
  std::string s(static_cast<size_t>(std::ftell(f)), '\0');
  std::rewind(f);
  s.resize(std::fread(s.data(), 1, s.size(), f));
  return s;
}

}  // namespace

TEST_CASE("log.progress auto draws only on a terminal a person watches", "[unit]") {
  CHECK(progress_bar_wanted("auto", true, env_of({{"TERM", "xterm-256color"}})));
  CHECK_FALSE(progress_bar_wanted("auto", false, env_of({{"TERM", "xterm"}})));  // redirected
  CHECK_FALSE(progress_bar_wanted("auto", true, env_of({{"TERM", "dumb"}})));
  CHECK_FALSE(progress_bar_wanted("auto", true, env_of({})));  // no TERM
  CHECK_FALSE(progress_bar_wanted("auto", true, env_of({{"TERM", ""}})));
  // mpirun gives every rank a pty: what they print lands in files
  CHECK_FALSE(progress_bar_wanted("auto", true, env_of({{"TERM", "xterm"}, {"OMPI_COMM_WORLD_RANK", "0"}})));
  CHECK_FALSE(progress_bar_wanted("auto", true, env_of({{"TERM", "xterm"}, {"OMPI_COMM_WORLD_SIZE", "4"}})));
  CHECK_FALSE(progress_bar_wanted("auto", true, env_of({{"TERM", "xterm"}, {"PMI_RANK", "0"}})));
  // on forces it, off refuses it
  CHECK(progress_bar_wanted("on", false, env_of({{"TERM", "dumb"}, {"OMPI_COMM_WORLD_RANK", "0"}})));
  CHECK_FALSE(progress_bar_wanted("off", true, env_of({{"TERM", "xterm"}})));
  CHECK(terminal_env_interactive(env_of({{"TERM", "screen"}})));
  CHECK_FALSE(terminal_env_interactive(env_of({{"TERM", "screen"}, {"PMI_SIZE", "2"}})));
}

TEST_CASE("every console log line is preceded by the bar cleared and followed by it redrawn", "[unit]") {
  FILE* f = std::tmpfile();
  REQUIRE(f);
  init_console_logging("info");
  {
    ProgressDisplay bar(true, 10, f);
    bar.set_loss(2.5);
    bar.update(3);
    const std::string drawn = contents_of(f);
    REQUIRE(drawn.rfind("\r[", 0) == 0);
    REQUIRE(drawn.find("3/10 steps") != std::string::npos);
    REQUIRE(drawn.substr(drawn.size() - 3) == "\x1b[K");
    spdlog::info("a line from anywhere");  // not through RunLog: a checkpoint message, say
    const std::string after = contents_of(f);
    const std::string bar_text = drawn.substr(1, drawn.size() - 4);
    CHECK(after == drawn + "\r\x1b[K" + "\r" + bar_text + "\x1b[K");
    bar.clear();  // cleared by hand: a log line neither erases nor redraws anything
    const std::string cleared = contents_of(f);
    CHECK(cleared == after + "\r\x1b[K");
    spdlog::info("another line");
    CHECK(contents_of(f) == cleared);
  }
  // gone: log lines touch nothing it wrote
  const std::string at_end = contents_of(f);
  spdlog::info("after the bar");
  CHECK(contents_of(f) == at_end);
  std::fclose(f);
}

TEST_CASE("a disabled bar writes nothing, not even around log lines", "[unit]") {
  FILE* f = std::tmpfile();
  REQUIRE(f);
  init_console_logging("info");
  {
    ProgressDisplay bar(false, 10, f);
    bar.update(5);
    spdlog::info("line");
    bar.clear();
  }
  CHECK(contents_of(f).empty());
  std::fclose(f);
}
