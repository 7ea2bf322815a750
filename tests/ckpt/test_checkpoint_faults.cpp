// Saves that fail (read-only folder, full filesystem): the error names the path and errno text, the
// temporary folder is gone, and the previous checkpoint is intact and still the one resume picks.
// Root ignores permission bits, so these use real mounts (a small tmpfs); where mounting is not
// permitted they warn and skip.
#include <catch2/catch.hpp>

#include "ckpt_test_util.hpp"
#include "test_util.hpp"
#include "skip.hpp"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("checkpoint fault: a save into a read-only folder fails and keeps the previous one", "[unit]") {
  auto root = test::scratch_dir("ckpt_readonly");
  test::TmpfsMount mnt(root / "mnt", "4m");
  if (!mnt.mounted()) {
    TRAINER_SKIP("cannot mount a tmpfs here (" << mnt.error() << ")");
  }
  const auto dir = root / "mnt" / "checkpoints";
  io::CheckpointStore store(dir, {.keep_last = 1, .keep_every = 0});
  store.save(1, test::sample_content(1));
  REQUIRE(mnt.remount_read_only());
  const auto tmp = dir / (".step-2.tmp-" + std::to_string(::getpid()));
  try {
    store.save(2, test::sample_content(2));
    FAIL("save into a read-only filesystem succeeded");
  } catch (const io::CheckpointError& e) {
    CHECK(std::string(e.what()) == tmp.string() + ": cannot create checkpoint folder: Read-only file system");
  }
  CHECK(entries(dir) == std::set<std::string>{"latest", "step-1"});
  CHECK_NOTHROW(io::verify_checkpoint(dir / "step-1"));
  auto scan = store.find_newest_complete();
  REQUIRE(scan.newest);
  CHECK(scan.newest->step == 1);
}

TEST_CASE("checkpoint fault: a store over a folder it cannot write into is refused when it opens, not at its saves",
          "[unit]") {
  auto root = test::scratch_dir("ckpt_readonly_open");
  test::TmpfsMount mnt(root / "mnt", "1m");
  if (!mnt.mounted()) {
    TRAINER_SKIP("cannot mount a tmpfs here (" << mnt.error() << ")");
  }
  const auto dir = root / "mnt" / "checkpoints";
  std::filesystem::create_directories(dir);
  REQUIRE(mnt.remount_read_only());  // root passes access(2) on it: only a write tells
  try {
    io::CheckpointStore store(dir, {.keep_last = 1, .keep_every = 0});
    FAIL("a store over a read-only folder opened");
  } catch (const io::CheckpointError& e) {
    CHECK(std::string(e.what()) == dir.string() + ": cannot write into the checkpoint folder: Read-only file system");
  }
}

TEST_CASE("checkpoint fault: a full filesystem fails the save, removes the temporary folder, keeps the last good one",
          "[unit]") {
  auto root = test::scratch_dir("ckpt_diskfull");
  test::TmpfsMount mnt(root / "mnt", "256k");
  if (!mnt.mounted()) {
    TRAINER_SKIP("cannot mount a tmpfs here (" << mnt.error() << ")");
  }
  const auto dir = root / "mnt" / "checkpoints";
  // keep_last 1: a successful save would delete step-1, a failed one must not
  io::CheckpointStore store(dir, {.keep_last = 1, .keep_every = 0});
  store.save(1, test::sample_content(1, 1000));            // ~8 KB
  std::string message;
  try {
    store.save(2, test::sample_content(2, 200'000));       // ~1.6 MB: cannot fit in 256 KiB
  } catch (const io::CheckpointError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK_THAT(message, Catch::StartsWith((dir / (".step-2.tmp-" + std::to_string(::getpid()))).string()));
  CHECK_THAT(message, Catch::EndsWith("No space left on device"));
  CHECK(entries(dir) == std::set<std::string>{"latest", "step-1"});
  CHECK(fs::read_symlink(dir / "latest").string() == "step-1");
  CHECK_NOTHROW(io::verify_checkpoint(dir / "step-1"));
  // and the space was given back: a checkpoint that fits saves fine afterwards
  CHECK_NOTHROW(store.save(3, test::sample_content(3, 1000)));
  CHECK(entries(dir) == std::set<std::string>{"latest", "step-3"});
}
