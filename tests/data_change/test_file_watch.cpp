// Data files that change under the datasets that hold them (data/file_watch.hpp): a read of a
// truncated mapping is a DataChanged (never a SIGBUS), the loader finds changes at an epoch
// boundary, and image folder files deleted or replaced are DataChanged whatever on_bad_sample says.
// The same through `trainer run`: tests/data_change/test_data_change_runs.cpp.
#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>

#include <functional>

#include "data/dataset.hpp"
#include "data/file_util.hpp"
#include "data/file_watch.hpp"
#include "data/loader.hpp"
#include "data/fixtures.hpp"

using namespace trainer;
using namespace trainer::test;

namespace {

std::string changed_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const data::DataChanged& e) {
    return e.what();
  }
  return "(no DataChanged)";
}

std::vector<uint16_t> token_run(size_t n, uint16_t vocab) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>((i * 7 + 3) % vocab);
  return t;
}

void replace_file(const fs::path& p, const std::string& bytes) {  // a new inode under the old name
  write_file(p.string() + ".new", bytes);
  fs::rename(p.string() + ".new", p);
}

}  // namespace

TEST_CASE("file watch: describe_change names truncation, growth, deletion, replacement and rewrites", "[unit]") {
  auto dir = scratch_dir("watch_describe");
  const fs::path f = dir / "a.bin";
  write_file(f, std::string(100, 'x'));
  const data::FileStamp s = data::stamp_path(f.string());
  CHECK(data::describe_change(f.string(), s).empty());
  fs::resize_file(f, 40);
  CHECK(data::describe_change(f.string(), s) == "it was truncated from 100 to 40 bytes");
  fs::resize_file(f, 150);
  CHECK(data::describe_change(f.string(), s) == "it grew from 100 to 150 bytes");
  fs::resize_file(f, 100);
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};  // same size, another mtime: rewritten in place
  REQUIRE(::utimensat(AT_FDCWD, f.c_str(), times, 0) == 0);
  CHECK(data::describe_change(f.string(), s) == "it was modified (its mtime changed)");
  replace_file(f, std::string(100, 'y'));
  CHECK(data::describe_change(f.string(), s) == "it was replaced by another file");
  fs::remove(f);
  CHECK(data::describe_change(f.string(), s) == "it was deleted");
}

TEST_CASE("file watch: a guarded copy from a mapping whose file was truncated returns false, not SIGBUS", "[unit]") {
  auto dir = scratch_dir("watch_guard");
  const fs::path f = dir / "m.bin";
  const long page = ::sysconf(_SC_PAGE_SIZE);
  write_file(f, std::string(static_cast<size_t>(4 * page), 'z'));
  data::MappedFile map(f.string());
  std::vector<uint8_t> out(static_cast<size_t>(page));
  REQUIRE(data::guarded_copy(out.data(), map.data() + 2 * page, out.size()));
  CHECK(out[0] == 'z');
  fs::resize_file(f, page);  // pages 1..3 no longer exist: touching them is a SIGBUS
  for (int i = 0; i < 3; ++i) CHECK_FALSE(data::guarded_copy(out.data(), map.data() + 2 * page, out.size()));
  CHECK(data::guarded_copy(out.data(), map.data(), out.size()));  // the first page is still there
  CHECK(changed_message([&] { map.copy(out.data(), 3 * page, 16); }) ==
        f.string() + ": the data file changed while the run was using it: it was truncated from " +
            std::to_string(4 * page) + " to " + std::to_string(page) + " bytes");
}

TEST_CASE("file watch: token shards truncated under a dataset give DataChanged from fill and the epoch check",
          "[unit]") {
  auto dir = scratch_dir("watch_tokens");
  const fs::path f = dir / "train.bin";
  write_nanogpt(f, token_run(40000, 50));
  auto cfg = plain_data_cfg("tokens", f);
  auto pair = data::create_datasets(cfg, gpt(16, 64), 0);
  std::vector<int64_t> in(16), target(16);
  REQUIRE(pair.train->fill(pair.train->size() - 1, 0, false, in.data(), target.data()));
  pair.train->check_unchanged();  // nothing changed: no throw
  fs::resize_file(f, 0);
  const std::string msg = changed_message([&] { pair.train->fill(pair.train->size() - 1, 0, false, in.data(), target.data()); });
  CHECK(msg == f.string() + ": the data file changed while the run was using it: it was truncated from 80000 to 0 bytes");
  CHECK(changed_message([&] { pair.train->check_unchanged(); }) == msg);
}

TEST_CASE("file watch: the loader reports a replaced text file at the next epoch boundary, in order", "[unit]") {
  auto dir = scratch_dir("watch_loader");
  const fs::path f = dir / "t.txt";
  write_file(f, std::string(16 * 8 + 1, 'a'));  // 8 windows of 16 + 1: two batches of 4 per epoch
  auto cfg = plain_data_cfg("text", f);
  auto pair = data::create_datasets(cfg, gpt(16), 0);
  for (int64_t workers : {0, 2}) {
    data::LoaderOptions o;
    o.batch_size = 4;
    o.workers = workers;
    o.prefetch = 3;
    data::DataLoader loader(pair.train, o);
    REQUIRE(loader.next());  // epoch 0, batch 1
    replace_file(f, std::string(16 * 8 + 1, 'b'));  // the mapping keeps the old file: no fault
    auto b = loader.next();  // epoch 0, batch 2: built from the old file
    REQUIRE(b);
    CHECK(b->input[0][0].item<int64_t>() == 'a');
    CHECK(changed_message([&] { loader.next(); }) ==
          f.string() + ": the data file changed while the run was using it: it was replaced by another file");
    CHECK(loader.state() == data::LoaderState{0, 8});  // nothing of epoch 1 was delivered
    write_file(f, std::string(16 * 8 + 1, 'a'));  // (the next round's first file: a fresh dataset)
    pair = data::create_datasets(cfg, gpt(16), 0);
  }
}

TEST_CASE("file watch: a loader told not to look at epoch starts reads a replaced file's old contents on",
          "[unit]") {
  // a multi-rank run looks at its files at the boundary vote only (look_at_epoch_start false): the
  // epoch after a replacement comes from the old mapping until the caller's look finds the change,
  // and check_due still names the step that begins the epoch, where the caller looks
  auto dir = scratch_dir("watch_loader_nolook");
  const fs::path f = dir / "t.txt";
  write_file(f, std::string(16 * 8 + 1, 'a'));  // 8 windows of 16 + 1: two batches of 4 per epoch
  auto pair = data::create_datasets(plain_data_cfg("text", f), gpt(16), 0);
  data::LoaderOptions o;
  o.batch_size = 4;
  o.workers = 0;
  o.look_at_epoch_start = false;
  data::DataLoader loader(pair.train, o);
  REQUIRE(loader.next());
  REQUIRE(loader.next());  // the end of epoch 0
  CHECK(loader.check_due(1));  // the next batch begins epoch 1: the caller looks before it
  replace_file(f, std::string(16 * 8 + 1, 'b'));
  auto b = loader.next();  // epoch 1, from the old mapping: no error from the loader
  REQUIRE(b);
  CHECK(b->epoch == 1);
  CHECK(b->input[0][0].item<int64_t>() == 'a');
  CHECK_FALSE(loader.check_due(1));  // within epoch 1
  CHECK(changed_message([&] { pair.train->check_unchanged(); }) ==
        f.string() + ": the data file changed while the run was using it: it was replaced by another file");
}

TEST_CASE("file watch: IDX and CIFAR files held in memory are checked against their stamps", "[unit]") {
  auto dir = scratch_dir("watch_memory");
  write_idx(dir / "idx", "train", std::vector<int>(12, 1), 4, 4, false);
  write_cifar(dir / "cifar" / "data_batch_1.bin", std::vector<int>(6, 2), false);
  auto idx = data::create_datasets(plain_data_cfg("idx", dir / "idx"), resnet(1, 10), 0);
  auto cifar = data::create_datasets(plain_data_cfg("cifar", dir / "cifar"), resnet(3, 10), 0);
  idx.train->check_unchanged();
  cifar.train->check_unchanged();
  fs::remove(dir / "idx" / "train-labels-idx1-ubyte");
  CHECK(changed_message([&] { idx.train->check_unchanged(); }) ==
        (dir / "idx" / "train-labels-idx1-ubyte").string() +
            ": the data file changed while the run was using it: it was deleted");
  fs::resize_file(dir / "cifar" / "data_batch_1.bin", 3073);
  CHECK(changed_message([&] { cifar.train->check_unchanged(); }) ==
        (dir / "cifar" / "data_batch_1.bin").string() +
            ": the data file changed while the run was using it: it was truncated from 18438 to 3073 bytes");
  // the samples themselves are in memory: still readable, never a fault
  std::vector<uint8_t> px(3 * 32 * 32);
  int64_t label = -1;
  CHECK(cifar.train->fill(5, 0, false, px.data(), &label));
  CHECK(label == 2);
}

TEST_CASE("file watch: an image folder file deleted or replaced is DataChanged, even under on_bad_sample skip",
          "[unit]") {
  auto dir = scratch_dir("watch_folder");
  write_image_folder(dir / "train", {"a", "b"}, 3, 8, 8, /*png=*/true);
  auto cfg = plain_data_cfg("image_folder", dir / "train");
  cfg.on_bad_sample = "skip";
  auto pair = data::create_datasets(cfg, resnet(3, 2), 0);
  std::vector<uint8_t> px(3 * 8 * 8);
  int64_t label = -1;
  REQUIRE(pair.train->fill(0, 0, false, px.data(), &label));
  fs::remove(dir / "train/a/img_0.png");
  CHECK(changed_message([&] { pair.train->fill(0, 0, false, px.data(), &label); }) ==
        (dir / "train/a/img_0.png").string() + ": the data file changed while the run was using it: it was deleted");
  auto px1 = interleaved_image(0, 8, 8, 3);
  data::write_png((dir / "train/b/img_1.png.new").string(), px1.data(), 8, 8, 3);
  fs::rename(dir / "train/b/img_1.png.new", dir / "train/b/img_1.png");  // a valid image, but not the one scanned
  CHECK(changed_message([&] { pair.train->fill(4, 0, false, px.data(), &label); }) ==
        (dir / "train/b/img_1.png").string() +
            ": the data file changed while the run was using it: it was replaced by another file");
  CHECK(pair.train->skipped() == 0);  // neither was counted as a bad sample
}
