// A rank that dies of a fatal signal leaves its last words (obs/crash_report.hpp): which signal, and
// its stack, on stderr and in its rank log; and it still dies of that signal (exit status 139).
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>

#include "test_util.hpp"

using trainer::test::read_file;
using trainer::test::run_trainer;
namespace fs = std::filesystem;

TEST_CASE("a run that dies of SIGSEGV names the signal and its stack on stderr and in its rank log", "[e2e]") {
  auto dir = trainer::test::scratch_dir("crash_report");
  trainer::test::write_file(dir / "exp.yaml",
                            "run:\n  name: c\n  out_dir: out\nmodel:\n  depth: 8\n  width: 0.25\n  in_channels: 1\n"
                            "  num_classes: 2\ndata:\n  format: synthetic\n  workers: 2\n  synthetic:\n"
                            "    num_samples: 64\n    val_samples: 0\n    image_size: 8\n"
                            "train:\n  batch_size: 8\n  max_steps: 6\n  log_every: 1\n"
                            "checkpoint:\n  every_steps: 2\nlog:\n  progress: \"off\"\n");
  auto r = run_trainer("run " + (dir / "exp.yaml").string(), "TRAINER_INJECT_CRASH=3");
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGSEGV);  // the signal's own death, not an exit code of the handler's
  const std::string line = "[rank 0] fatal: SIGSEGV (invalid memory access) in thread ";
  CHECK(r.output.find(line) != std::string::npos);
  CHECK(r.output.find("; the process ends with this signal. Stack:\n") != std::string::npos);
  const auto log = read_file(dir / "out" / "c" / "logs" / "rank0.log");
  INFO(log);
  const auto at = log.find(line);
  REQUIRE(at != std::string::npos);
  CHECK(log.find("step 3/6", 0) < at);  // after the records of the steps that ran
  CHECK(log.find("trainer(", at) != std::string::npos);  // frames of the binary: "<path>/trainer(+0x...)"
  CHECK(log.find("`addr2line -Cfe BINARY OFFSET` names its function and line", at) != std::string::npos);
  // what was saved before the crash is intact: a resume continues from step 2's checkpoint
  auto again = run_trainer("run " + (dir / "exp.yaml").string());
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(again.output.find("step 6/6") != std::string::npos);
  CHECK(again.output.find("step 1/6") == std::string::npos);  // it went on from step 2, not from the start
}
