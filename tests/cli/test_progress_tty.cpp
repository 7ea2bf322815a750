// `trainer run` on a terminal: the progress bar never shares a line with a log line, and where the
// terminal is an mpirun rank's pty (or not a person's) no escape codes are written at all.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

// Runs a command on a fresh pty (stdin, stdout and stderr all the pty, as in a terminal) and
// prints everything the terminal received.
constexpr const char* kPtyRunner = R"(import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out = b''
while True:
    try:
        d = os.read(fd, 65536)
    except OSError:
        break
    if not d:
        break
    out += d
_, st = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
sys.exit(os.waitstatus_to_exitcode(st))
)";

// A run with a train line every step and a checkpoint message every 2 steps (not through the
// metrics path), on a terminal; `env` is put in front of the trainer command.
trainer::test::CommandResult run_on_pty(const fs::path& dir, const std::string& env) {
  trainer::test::write_file(dir / "on_a_pty.py", kPtyRunner);
  trainer::test::write_file(dir / "exp.yaml",
                            "run:\n  name: bar\n  out_dir: out\nmodel:\n  depth: 8\n  width: 0.25\n  in_channels: 1\n"
                            "  num_classes: 2\ndata:\n  format: synthetic\n  workers: 0\n  synthetic:\n"
                            "    num_samples: 64\n    val_samples: 0\n    image_size: 8\ntrain:\n  batch_size: 4\n"
                            "  max_steps: 12\n  log_every: 1\n  threads: 1\ncheckpoint:\n  every_steps: 2\n");
  return trainer::test::run_shell("python3 " + (dir / "on_a_pty.py").string() + " env " + env + " \"" + TRAINER_BIN +
                                  "\" run " + (dir / "exp.yaml").string() + " --resume never --force");
}

// The terminal's lines as they show: what follows the last carriage return of each ("\r\n" ends
// a line on a pty).
std::vector<std::string> visible_lines(const std::string& raw) {
  std::vector<std::string> out;
  std::istringstream in(raw);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto cr = line.rfind('\r');
    out.push_back(cr == std::string::npos ? line : line.substr(cr + 1));
  }
  return out;
}

// A log line as shown: "[2026-..." possibly after the bar's "erase line" and a colour code.
bool starts_like_a_log_line(std::string s) {
  if (s.rfind("\x1b[K", 0) == 0) s = s.substr(3);
  while (s.rfind("\x1b[", 0) == 0 && s.find('m') != std::string::npos) s = s.substr(s.find('m') + 1);  // colours
  return s.size() > 5 && s[0] == '[' && s.substr(1, 2) == "20";
}

}  // namespace

TEST_CASE("on a terminal every log line starts at column 0, never after the progress bar", "[e2e]") {
  auto dir = trainer::test::scratch_dir("progress_tty");
  auto r = run_on_pty(dir, "TERM=xterm");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.output.find(" steps  ") != std::string::npos);  // the bar was drawn
  REQUIRE(r.output.find("\r\x1b[K") != std::string::npos);  // and cleared
  int log_lines = 0, checkpoint_lines = 0;
  for (const auto& line : visible_lines(r.output)) {
    if (line.find("[info]") == std::string::npos && line.find("[warning]") == std::string::npos) continue;
    INFO(line);
    CHECK(starts_like_a_log_line(line));
    ++log_lines;
    if (line.find("checkpoint") != std::string::npos) ++checkpoint_lines;
  }
  CHECK(log_lines >= 12);
  CHECK(checkpoint_lines >= 5);
}

TEST_CASE("mpirun ranks and dumb terminals get no progress bar and no escape codes", "[e2e]") {
  for (const std::string env : {"TERM=xterm OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0",
                                "TERM=dumb", "-u TERM"}) {
    INFO(env);
    auto dir = trainer::test::scratch_dir("progress_no_tty");
    auto r = run_on_pty(dir, env);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("] [info] ") != std::string::npos);
    CHECK(r.output.find('\x1b') == std::string::npos);
    CHECK(r.output.find(" steps  ") == std::string::npos);
  }
}
