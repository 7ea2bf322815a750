// Checkpoint storage: round trip, atomic layout, checksums, `latest`, retention, resolution.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <functional>

#include "ckpt_test_util.hpp"
#include "config/sha256.hpp"
#include "test_util.hpp"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> steps_of(const io::CheckpointStore& store) {
  std::vector<int64_t> out;
  for (const auto& c : store.list()) out.push_back(c.step);
  return out;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const io::CheckpointError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("checkpoint: save then load returns the same tensors and state", "[unit]") {
  auto dir = test::scratch_dir("ckpt_roundtrip");
  io::CheckpointStore store(dir);
  auto content = test::sample_content(7);
  auto path = store.save(7, content);
  CHECK(path.string() == (dir / "step-7").string());
  auto loaded = io::load_checkpoint(path);
  REQUIRE(loaded.groups.size() == 2);
  for (const auto& [group, tensors] : content.groups) {
    const auto& got = loaded.groups.at(group);
    REQUIRE(got.size() == tensors.size());
    std::map<std::string, torch::Tensor> by_name(got.begin(), got.end());
    for (const auto& [name, t] : tensors) {
      INFO(group << "/" << name);
      CHECK(by_name.at(name).dtype() == t.dtype());
      CHECK(torch::equal(by_name.at(name), t));
    }
  }
  CHECK(loaded.state == content.state);
}

TEST_CASE("checkpoint: folder layout, manifest checksums and the latest link", "[unit]") {
  auto dir = test::scratch_dir("ckpt_layout");
  io::CheckpointStore store(dir);
  store.save(3, test::sample_content(3));
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "step-3")) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{"manifest.json", "model.safetensors", "optimizer.safetensors", "state.json"});
  auto m = test::read_json(dir / "step-3" / "manifest.json");
  CHECK(m["step"] == 3);
  CHECK(m["torch_version"] == TORCH_VERSION);
  for (const auto& f : {"model.safetensors", "optimizer.safetensors", "state.json"}) {
    CHECK(m["files"][f]["sha256"] == sha256_file_hex((dir / "step-3" / f).string()));
    CHECK(m["files"][f]["bytes"] == static_cast<int64_t>(fs::file_size(dir / "step-3" / f)));
  }
  CHECK(fs::read_symlink(dir / "latest").string() == "step-3");
  // nothing temporary is left next to it
  std::set<std::string> top;
  for (const auto& e : fs::directory_iterator(dir)) top.insert(e.path().filename().string());
  CHECK(top == std::set<std::string>{"latest", "step-3"});
}

TEST_CASE("checkpoint: RNG state stored as a byte tensor restores the same random stream", "[unit]") {
  auto dir = test::scratch_dir("ckpt_rng");
  io::CheckpointStore store(dir);
  torch::manual_seed(11);
  torch::randn({5});
  auto gen = at::detail::getDefaultCPUGenerator();
  io::CheckpointContent c;
  c.groups["rng"] = {{"cpu", gen.get_state()}};
  store.save(1, c);
  auto expected = torch::randn({8});
  torch::manual_seed(999);  // disturb the stream
  auto loaded = io::load_checkpoint(dir / "step-1");
  gen.set_state(loaded.groups.at("rng").at(0).second);
  CHECK(torch::equal(torch::randn({8}), expected));
}

TEST_CASE("checkpoint: a flipped byte is rejected with the file and both hashes", "[unit]") {
  auto dir = test::scratch_dir("ckpt_bitflip");
  io::CheckpointStore store(dir);
  store.save(1, test::sample_content(1));
  store.save(2, test::sample_content(2));
  auto file = dir / "step-2" / "model.safetensors";
  const std::string expected = test::read_json(dir / "step-2" / "manifest.json")["files"]["model.safetensors"]["sha256"];
  test::flip_byte(file, static_cast<std::streamoff>(fs::file_size(file) - 3));  // inside the tensor data
  const std::string actual = sha256_file_hex(file.string());
  REQUIRE(actual != expected);
  const std::string want = file.string() + ": checksum mismatch: expected sha256 " + expected + ", actual " + actual;
  CHECK(error_of([&] { io::verify_checkpoint(dir / "step-2"); }) == want);
  CHECK(error_of([&] { io::load_checkpoint(dir / "step-2"); }) == want);
  // resume falls back to the previous complete checkpoint and says why
  auto scan = store.find_newest_complete();
  REQUIRE(scan.newest);
  CHECK(scan.newest->step == 1);
  CHECK(scan.rejected == std::vector<std::string>{want});
}

TEST_CASE("checkpoint: a truncated file is rejected with the file, both hashes and sizes", "[unit]") {
  auto dir = test::scratch_dir("ckpt_truncated");
  io::CheckpointStore store(dir);
  store.save(4, test::sample_content(4));
  auto file = dir / "step-4" / "optimizer.safetensors";
  const auto m = test::read_json(dir / "step-4" / "manifest.json");
  const std::string expected = m["files"]["optimizer.safetensors"]["sha256"];
  const int64_t size = m["files"]["optimizer.safetensors"]["bytes"];
  fs::resize_file(file, static_cast<uintmax_t>(size - 100));
  const std::string actual = sha256_file_hex(file.string());
  CHECK(error_of([&] { io::verify_checkpoint(dir / "step-4"); }) ==
        file.string() + ": checksum mismatch: expected sha256 " + expected + ", actual " + actual + " (" +
            std::to_string(size - 100) + " bytes, expected " + std::to_string(size) + ": truncated)");
  CHECK_FALSE(store.find_newest_complete().newest);
}

TEST_CASE("checkpoint: a flipped byte in the manifest itself is caught", "[unit]") {
  auto dir = test::scratch_dir("ckpt_manifest_flip");
  io::CheckpointStore store(dir);
  store.save(5, test::sample_content(5));
  auto manifest = dir / "step-5" / "manifest.json";
  // change one hex digit of a recorded hash: still valid JSON, but no longer the manifest that was written
  std::string text = test::read_file(manifest);
  auto pos = text.find("\"sha256\": \"") + 11;
  text[pos] = text[pos] == 'a' ? 'b' : 'a';
  test::write_file(manifest, text);
  auto err = error_of([&] { io::verify_checkpoint(dir / "step-5"); });
  CHECK_THAT(err, Catch::StartsWith(manifest.string() + ": checksum mismatch: expected sha256 "));
}

TEST_CASE("checkpoint: a torn manifest or a folder without one is not a checkpoint", "[unit]") {
  auto dir = test::scratch_dir("ckpt_torn_manifest");
  io::CheckpointStore store(dir);
  store.save(1, test::sample_content(1));
  store.save(2, test::sample_content(2));
  store.save(3, test::sample_content(3));
  auto manifest = dir / "step-3" / "manifest.json";
  fs::resize_file(manifest, fs::file_size(manifest) / 2);
  fs::remove(dir / "step-2" / "manifest.json");
  auto scan = store.find_newest_complete();
  REQUIRE(scan.newest);
  CHECK(scan.newest->step == 1);
  REQUIRE(scan.rejected.size() == 2);
  CHECK_THAT(scan.rejected[0], Catch::StartsWith(manifest.string() + ": invalid JSON (torn or corrupted manifest)"));
  CHECK(scan.rejected[1] == (dir / "step-2").string() + ": incomplete checkpoint: no manifest.json");
}

TEST_CASE("checkpoint: a missing, dangling or torn latest is harmless", "[unit]") {
  auto dir = test::scratch_dir("ckpt_latest");
  io::CheckpointStore store(dir);
  store.save(1, test::sample_content(1));
  store.save(2, test::sample_content(2));
  SECTION("missing") { fs::remove(dir / "latest"); }
  SECTION("dangling") {
    fs::remove(dir / "latest");
    fs::create_symlink("step-99", dir / "latest");
  }
  SECTION("torn: a half-written regular file") {
    fs::remove(dir / "latest");
    test::write_file(dir / "latest", "ste");
  }
  SECTION("pointing at an older checkpoint") {
    fs::remove(dir / "latest");
    fs::create_symlink("step-1", dir / "latest");
  }
  auto scan = store.find_newest_complete();
  REQUIRE(scan.newest);
  CHECK(scan.newest->step == 2);
  CHECK(scan.rejected.empty());
  CHECK(io::resolve_checkpoint_path(dir).string() == fs::canonical(dir / "step-2").string());
  store.save(3, test::sample_content(3));  // and the next save replaces it
  CHECK(fs::read_symlink(dir / "latest").string() == "step-3");
}

TEST_CASE("checkpoint: keep_last keeps the newest N", "[unit]") {
  auto dir = test::scratch_dir("ckpt_keep_last");
  io::CheckpointStore store(dir, {.keep_last = 2, .keep_every = 0});
  for (int64_t s = 1; s <= 5; ++s) store.save(s * 10, test::sample_content(s));
  CHECK(steps_of(store) == std::vector<int64_t>{40, 50});
  std::set<std::string> top;
  for (const auto& e : fs::directory_iterator(dir)) top.insert(e.path().filename().string());
  CHECK(top == std::set<std::string>{"latest", "step-40", "step-50"});  // no .deleting-* leftovers
}

TEST_CASE("checkpoint: keep_every keeps multiples of K forever on top of keep_last", "[unit]") {
  auto dir = test::scratch_dir("ckpt_keep_every");
  io::CheckpointStore store(dir, {.keep_last = 1, .keep_every = 20});
  for (int64_t s = 10; s <= 70; s += 10) store.save(s, test::sample_content(s));
  CHECK(steps_of(store) == std::vector<int64_t>{20, 40, 60, 70});
}

TEST_CASE("checkpoint: the best checkpoint survives keep_last", "[unit]") {
  auto dir = test::scratch_dir("ckpt_best");
  io::CheckpointStore store(dir, {.keep_last = 1, .keep_every = 0});
  store.save(1, test::sample_content(1));
  store.save(2, test::sample_content(2));
  store.mark_best(2);
  store.save(3, test::sample_content(3));
  store.save(4, test::sample_content(4));
  CHECK(steps_of(store) == std::vector<int64_t>{2, 4});
  CHECK(store.best_step() == 2);
  CHECK(io::resolve_checkpoint_path(dir / "best").string() == fs::canonical(dir / "step-2").string());
  CHECK(error_of([&] { store.mark_best(3); }) ==
        (dir / "step-3").string() + ": cannot mark as best: not a complete checkpoint");
}

TEST_CASE("checkpoint: pruning leaves later steps of an abandoned future alone", "[unit]") {
  auto dir = test::scratch_dir("ckpt_prune_future");
  io::CheckpointStore store(dir, {.keep_last = 1, .keep_every = 0});
  store.save(5, test::sample_content(5));
  store.save(9, test::sample_content(9));  // keep_last 1 removes 5
  store.save(2, test::sample_content(2));  // resumed from elsewhere at step 2: 9 is not pruned by it
  CHECK(steps_of(store) == std::vector<int64_t>{2, 9});
}

TEST_CASE("checkpoint: saving a step again replaces it atomically", "[unit]") {
  auto dir = test::scratch_dir("ckpt_resave");
  io::CheckpointStore store(dir);
  store.save(6, test::sample_content(6));
  auto second = test::sample_content(6);
  second.state["note"] = "second save";
  store.save(6, second);
  CHECK(io::load_checkpoint(dir / "step-6").state["note"] == "second save");
  std::set<std::string> top;
  for (const auto& e : fs::directory_iterator(dir)) top.insert(e.path().filename().string());
  CHECK(top == std::set<std::string>{"latest", "step-6"});
}

TEST_CASE("checkpoint: temporary folders and staged files of a dead process are removed, a live one's are kept", "[unit]") {
  auto dir = test::scratch_dir("ckpt_stale_tmp");
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // its pid now belongs to nobody
  fs::create_directories(dir / (".step-8.tmp-" + std::to_string(child)));
  test::write_file(dir / (".step-8.tmp-" + std::to_string(child)) / "model.safetensors", "partial");
  fs::create_directories(dir / ".step-9.tmp-1");  // pid 1 is alive
  // a rank's staged part, and the temporary its atomic write was making of it (killed mid-write)
  const std::string pid = std::to_string(child);
  test::write_file(dir / (".step-8.model-part1of2.staged-" + pid), "staged");
  test::write_file(dir / (".step-8.optimizer-part1of2.staged-" + pid + ".tmp." + pid), "half");
  test::write_file(dir / ".step-9.optimizer-part1of2.staged-1.tmp.1", "alive");
  io::CheckpointStore store(dir);
  CHECK_FALSE(fs::exists(dir / (".step-8.tmp-" + pid)));
  CHECK_FALSE(fs::exists(dir / (".step-8.model-part1of2.staged-" + pid)));
  CHECK_FALSE(fs::exists(dir / (".step-8.optimizer-part1of2.staged-" + pid + ".tmp." + pid)));
  CHECK(fs::exists(dir / ".step-9.tmp-1"));
  CHECK(fs::exists(dir / ".step-9.optimizer-part1of2.staged-1.tmp.1"));
  CHECK_FALSE(store.find_newest_complete().newest);
  // a dead rank (a zombie still, at start-up) leaves one behind later: the next save's prune removes it
  test::write_file(dir / (".step-8.optimizer-part1of2.staged-" + pid + ".tmp." + pid), "half");
  store.save(10, test::sample_content(10));
  CHECK_FALSE(fs::exists(dir / (".step-8.optimizer-part1of2.staged-" + pid + ".tmp." + pid)));
  CHECK(fs::exists(dir / ".step-9.optimizer-part1of2.staged-1.tmp.1"));
}

TEST_CASE("checkpoint: resolve_checkpoint_path errors name the path", "[unit]") {
  auto dir = test::scratch_dir("ckpt_resolve");
  CHECK(error_of([&] { io::resolve_checkpoint_path(dir / "nope"); }) ==
        (dir / "nope").string() + ": no such checkpoint or folder");
  test::write_file(dir / "file.txt", "x");
  CHECK(error_of([&] { io::resolve_checkpoint_path(dir / "file.txt"); }) ==
        (dir / "file.txt").string() + ": is a file, not a checkpoint folder");
  CHECK(error_of([&] { io::resolve_checkpoint_path(dir); }) ==
        dir.string() + ": no complete checkpoint (step-<N>/manifest.json) in this folder");
  io::CheckpointStore store(dir / "ck");
  store.save(1, test::sample_content(1));
  CHECK(io::resolve_checkpoint_path(dir / "ck" / "latest").string() == fs::canonical(dir / "ck" / "step-1").string());
  CHECK(io::resolve_checkpoint_path(dir / "ck" / "step-1").string() == fs::canonical(dir / "ck" / "step-1").string());
  store.save(2, test::sample_content(2));
  fs::remove_all(dir / "ck" / "step-2");
  CHECK(error_of([&] { io::resolve_checkpoint_path(dir / "ck" / "latest"); }) ==
        (dir / "ck" / "latest").string() + ": dangling link to step-2 (that checkpoint was deleted)");
  // a loop of links was called a dangling link (export), or a raw filesystem error (--resume)
  fs::create_symlink(dir / "loop_b", dir / "loop_a");
  fs::create_symlink(dir / "loop_a", dir / "loop_b");
  CHECK(error_of([&] { io::resolve_checkpoint_path(dir / "loop_a"); }) ==
        (dir / "loop_a").string() + ": a loop of symbolic links (Too many levels of symbolic links), not a checkpoint folder");
  CHECK(error_of([&] { io::resolve_checkpoint_path("/dev/null"); }) ==
        "/dev/null: is a character device, not a checkpoint folder");
}

TEST_CASE("checkpoint: a folder renamed to another step is rejected", "[unit]") {
  auto dir = test::scratch_dir("ckpt_renamed");
  io::CheckpointStore store(dir);
  store.save(3, test::sample_content(3));
  fs::rename(dir / "step-3", dir / "step-30");
  CHECK(error_of([&] { io::verify_checkpoint(dir / "step-30"); }) ==
        (dir / "step-30" / "manifest.json").string() + ": manifest is for step 3, but the folder is step-30");
}

TEST_CASE("checkpoint: invalid group names are refused before anything is written", "[unit]") {
  auto dir = test::scratch_dir("ckpt_group_name");
  io::CheckpointStore store(dir);
  io::CheckpointContent c;
  c.groups["../evil"] = {{"x", torch::zeros({1})}};
  CHECK(error_of([&] { store.save(1, c); }) == dir.string() + ": invalid tensor group name '../evil' (use [A-Za-z0-9_-])");
  CHECK(store.list().empty());
}
