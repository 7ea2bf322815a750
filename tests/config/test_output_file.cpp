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

std::string refusal(const fs::path& out, const std::vector<fs::path>& inputs = {},
                    const std::vector<fs::path>& data_folders = {}) {
  try {
    check_output_file("--out", out, inputs, data_folders);
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

// An input that is a folder (predict --input DIR, the data eval reads): nothing is written inside it.
// predict --output DIR/cat/1.jpg emptied an image it was about to read; eval's record replaced a
// validation image.
TEST_CASE("output file: a path inside an input folder is refused, one beside it passes", "[unit]") {
  auto dir = fs::weakly_canonical(trainer::test::scratch_dir("output_file_in_folder"));
  fs::create_directories(dir / "val" / "cat");
  trainer::test::write_file(dir / "val" / "cat" / "1.jpg", "x");
  const std::string why = " (it would replace or add to what is read there); write the output elsewhere";
  CHECK(refusal(dir / "val" / "cat" / "1.jpg", {}, {dir / "val"}) ==
        "--out " + (dir / "val" / "cat" / "1.jpg").string() + ": is inside this command's input folder " +
            (dir / "val").string() + why);
  CHECK(refusal(dir / "val" / "new.json", {}, {dir / "val"}) != "");          // not there yet: still inside
  CHECK(refusal(dir / "val" / ".." / "val" / "x.json", {}, {dir / "val"}) != "");
  CHECK(refusal(dir / "val.json", {}, {dir / "val"}) == "");                   // beside it
  CHECK(refusal(dir / "val" / "cat" / "2.json", {dir / "val"}) == "");  // a plain input folder (a run folder) allows it
  CHECK(refusal(dir / "out.json", {}, {dir / "val", "", dir / "missing"}) == "");  // empty and missing inputs ignored
}

// The atomic write the output commands use: a failure leaves the earlier file whole.
TEST_CASE("output file: write_file_atomic replaces the file whole, and a failed write leaves it as it was", "[unit]") {
  auto dir = trainer::test::scratch_dir("output_file_atomic");
  trainer::write_file_atomic(dir / "a.json", "first\n");
  CHECK(trainer::test::read_file(dir / "a.json") == "first\n");
  trainer::write_file_atomic(dir / "a.json", "second\n");
  CHECK(trainer::test::read_file(dir / "a.json") == "second\n");
  CHECK_THROWS_WITH(trainer::write_file_atomic(dir / "nofolder" / "a.json", "x"),
                    Catch::Contains((dir / "nofolder").string()) && Catch::Contains("cannot create"));
  int left = 0;
  for (const auto& e : fs::directory_iterator(dir)) left += e.path().filename().string().find(".tmp.") != std::string::npos;
  CHECK(left == 0);
}

// A writer killed with SIGKILL (an export of a large model) left its temporary beside the output for
// good. The next write of the same file removes this host's temporaries whose process is gone, and
// nothing else.
TEST_CASE("output file: an atomic write removes the temporaries dead writers of the same file left", "[unit]") {
  auto dir = trainer::test::scratch_dir("output_file_stale_tmp");
  const fs::path out = dir / "model.safetensors";
  const std::string mine = trainer::temporary_for(out).filename().string();  // PATH.tmp.HOST.PID
  const std::string host_part = mine.substr(0, mine.rfind('.') + 1);         // model.safetensors.tmp.HOST.
  // a pid no process has: past the kernel's limit
  const std::string dead = host_part + "4194305", alive = host_part + "1";
  const std::string other_host = "model.safetensors.tmp.another-host.4194305", other_file = "m.json.tmp.x.4194305";
  for (const auto& n : {dead, alive, other_host, other_file}) trainer::test::write_file(dir / n, "half");
  trainer::write_file_atomic(out, "whole\n");
  CHECK(trainer::test::read_file(out) == "whole\n");
  CHECK_FALSE(fs::exists(dir / dead));
  CHECK(fs::exists(dir / alive));       // pid 1 lives
  CHECK(fs::exists(dir / other_host));  // another host's writer may be alive
  CHECK(fs::exists(dir / other_file));  // another file's
}
