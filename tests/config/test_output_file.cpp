// check_output_file (config/file_write.hpp): what `export --out`, `report --out`, `eval --output` and
// `predict --output` refuse before anything is read or written.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "config/file_write.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using trainer::check_output_file;

namespace {

std::string refusal(const fs::path& out, const std::vector<fs::path>& inputs = {}) {
  try {
    check_output_file("--out", out, inputs);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("output file: devices, FIFOs and folders are refused, new and regular files pass", "[unit]") {
  auto dir = trainer::test::scratch_dir("output_file_kinds");
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  const std::string not_regular = ", not a regular file; name a file to write";
  CHECK(refusal("/dev/null") == "--out /dev/null: is a character device" + not_regular);
  CHECK(refusal("/dev/full") == "--out /dev/full: is a character device" + not_regular);
  CHECK(refusal(dir / "fifo") == "--out " + (dir / "fifo").string() + ": is a FIFO (named pipe)" + not_regular);
  CHECK(refusal(dir) == "--out " + dir.string() + ": is a folder; name the file to write in it");
  CHECK(refusal(dir / "new" / "x.safetensors") == "");
  trainer::test::write_file(dir / "old.html", "x");
  CHECK(refusal(dir / "old.html") == "");
}

TEST_CASE("output file: one of the command's inputs is refused, through another name too", "[unit]") {
  auto dir = trainer::test::scratch_dir("output_file_inputs");
  trainer::test::write_file(dir / "prompt.txt", "hello");
  fs::create_symlink(dir / "prompt.txt", dir / "alias.txt");
  CHECK(refusal(dir / "alias.txt", {dir / "missing", dir / "prompt.txt"}) ==
        "--out " + (dir / "alias.txt").string() + ": is also this command's input " + (dir / "prompt.txt").string() +
            "; write the output elsewhere");
  CHECK(refusal(dir / "other.txt", {dir / "prompt.txt"}) == "");
}

TEST_CASE("output file: a run directory's saved files and checkpoints are refused, a report beside them passes",
          "[unit]") {
  auto dir = trainer::test::scratch_dir("output_file_run_dir");
  const auto run = fs::weakly_canonical(dir) / "run";
  fs::create_directories(run / "checkpoints" / "step-4");
  fs::create_directories(run / "logs");
  for (const char* f : {".lock", "config.yaml", "metrics.jsonl"}) trainer::test::write_file(run / f, "x");
  trainer::test::write_file(run / "checkpoints" / "step-4" / "model.safetensors", "x");
  const std::string keep = " (what the run saved is not overwritten); write the output elsewhere";
  CHECK(refusal(run / "metrics.jsonl") == "--out " + (run / "metrics.jsonl").string() + ": is the run directory " +
                                              run.string() + "'s metrics.jsonl" + keep);
  CHECK(refusal(run / "config.yaml") != "");
  CHECK(refusal(run / "checkpoints" / "step-4" / "model.safetensors") ==
        "--out " + (run / "checkpoints" / "step-4" / "model.safetensors").string() + ": lies in the run directory " +
            run.string() + "'s checkpoints folder" + keep);
  CHECK(refusal(run / "checkpoints" / "new.json") != "");  // not yet there: still inside
  CHECK(refusal(run / "logs" / "rank0.log") != "");
  CHECK(refusal(run / "report.html") == "");  // `trainer report`'s own default
  // a checkpoint.dir outside the run directory holds a lock and no config
  const auto ckpts = fs::weakly_canonical(dir) / "elsewhere";
  fs::create_directories(ckpts / "step-2");
  trainer::test::write_file(ckpts / ".lock", "");
  CHECK(refusal(ckpts / "step-2" / "model.safetensors") == "--out " + (ckpts / "step-2" / "model.safetensors").string() +
                                                               ": lies in the checkpoint folder " + ckpts.string() + keep);
  // a folder that merely holds a config (no lock) is nobody's run directory
  fs::create_directories(dir / "plain");
  trainer::test::write_file(dir / "plain" / "config.yaml", "x");
  CHECK(refusal(dir / "plain" / "config.yaml") == "");
}
