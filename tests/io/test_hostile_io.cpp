// Hostile files for io (issue 18, items 5 and 6): safetensors headers with random fields, FIFOs and
// devices as init_from / safetensors / checkpoint manifest files, oversized manifests. Each fails
// at once with an error naming the file; error_within turns a hang into a failure.
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "hostile_util.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "test_util.hpp"
#include "skip.hpp"
#include <fmt/format.h>

using namespace trainer;
using namespace trainer::test;
namespace fs = std::filesystem;

namespace {

const char* kNotRegularFile = ", not a regular file (refusing to read it: it may block or never end)";

uint64_t extreme_u64(std::mt19937_64& rng) {
  static const uint64_t kEdges[] = {0, 1, 2, 7, 8, 255, 65536, 0x7fffffffull, 0xffffffffull, 1ull << 62,
                                    0x7fffffffffffffffull, 0xffffffffffffffffull};
  return rng() % 2 ? kEdges[rng() % std::size(kEdges)] : rng() % 64;
}

std::string le64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

// A checkpoint folder written by the store, for the manifest cases.
fs::path saved_checkpoint(const fs::path& root) {
  io::CheckpointStore store(root / "ckpts");
  io::CheckpointContent c;
  c.groups["model"] = {{"w", torch::arange(4, torch::kFloat32)}};
  c.state = {{"step", 1}};
  return store.save(1, c);
}

}  // namespace

TEST_CASE("fuzz: safetensors headers with random shapes, offsets, dtypes and lengths load or fail naming the file",
          "[unit]") {
  std::mt19937_64 rng(18009);
  auto dir = scratch_dir("fuzz_safetensors");
  const fs::path file = dir / "w.safetensors";
  const char* dtypes[] = {"F32", "F16", "I64", "U8", "BOOL", "F8", "", "I32"};
  int loaded = 0;
  for (int i = 0; i < 300; ++i) {
    nlohmann::json header = nlohmann::json::object();
    const int tensors = rng() % 4;
    const bool dense = rng() % 2;  // laid end to end, the data area exactly their bytes: the loadable half
    uint64_t cursor = 0;
    for (int t = 0; t < tensors; ++t) {
      nlohmann::json shape = nlohmann::json::array();
      for (int d = rng() % 4; d > 0; --d) {
        if (rng() % 8 == 0) shape.push_back(-static_cast<int64_t>(rng() % 5) - 1);
        else shape.push_back(rng() % 3 ? rng() % 5 : extreme_u64(rng));
      }
      uint64_t begin = rng() % 3 ? rng() % 32 : extreme_u64(rng), end = rng() % 3 ? begin + rng() % 64 : extreme_u64(rng);
      const std::string dtype = dtypes[rng() % std::size(dtypes)];
      if (dense) {  // half of them sized right for their dtype and shape, when that is small
        uint64_t bytes = rng() % 64;
        const std::map<std::string, uint64_t> elem = {{"F32", 4}, {"F16", 2}, {"I64", 8}, {"U8", 1}, {"BOOL", 1}, {"I32", 4}};
        uint64_t numel = 1;
        for (const auto& d : shape) numel = d.is_number_unsigned() && d.get<uint64_t>() < 8 ? numel * d.get<uint64_t>() : 1u << 20;
        if (rng() % 2 && elem.count(dtype) && numel < 64) bytes = numel * elem.at(dtype);
        begin = cursor, end = begin + bytes, cursor = end;
      }
      header[fmt::format("t{}", t)] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
    }
    const std::string text = header.dump();
    const uint64_t len = rng() % 4 ? text.size() : extreme_u64(rng);
    write_file(file, le64(len) + text + std::string(dense ? cursor : rng() % 96, '\x5a'));
    INFO("case " << i << ": length " << len << ", header " << text);
    std::string err = error_within(10, [&] {
      auto f = io::load_safetensors(file.string());
      for (const auto& [name, t] : f.tensors) CHECK(t.nbytes() <= fs::file_size(file));
    });
    INFO("error: " << err);
    if (!err.empty()) CHECK(starts_with(err, file.string() + ": "));
    loaded += err.empty();
  }
  CHECK(loaded >= 20);
}

TEST_CASE("hostile: a FIFO or device as a safetensors file (init_from) fails at once naming it", "[unit]") {
  auto dir = scratch_dir("hostile_st_fifo");
  if (!make_fifo(dir / "w.safetensors")) {
    TRAINER_SKIP("cannot create a FIFO here");
  }
  const std::string fifo = (dir / "w.safetensors").string();
  CHECK(error_within(10, [&] { io::load_safetensors(fifo); }) == fifo + ": is a FIFO (named pipe)" + kNotRegularFile);
  CHECK(error_within(10, [&] { io::load_safetensors("/dev/zero"); }) ==
        std::string("/dev/zero: is a character device") + kNotRegularFile);
  CHECK(error_within(10, [&] { io::load_safetensors(dir.string()); }) == dir.string() + ": is a folder" + kNotRegularFile);
}

TEST_CASE("hostile: a checkpoint manifest that is a FIFO, /dev/zero or huge fails at once naming it", "[unit]") {
  auto root = scratch_dir("hostile_manifest");
  const fs::path step = saved_checkpoint(root), manifest = step / "manifest.json";
  REQUIRE_NOTHROW(io::verify_checkpoint(step));
  fs::remove(manifest);
  if (!make_fifo(manifest)) {
    TRAINER_SKIP("cannot create a FIFO here");
  }
  CHECK(error_within(10, [&] { io::verify_checkpoint(step); }) ==
        manifest.string() + ": is a FIFO (named pipe)" + kNotRegularFile);
  CHECK(error_within(10, [&] { io::load_checkpoint(step); }) ==
        manifest.string() + ": is a FIFO (named pipe)" + kNotRegularFile);
  fs::remove(manifest);
  fs::create_symlink("/dev/zero", manifest);
  CHECK(error_within(10, [&] { io::verify_checkpoint(step); }) ==
        manifest.string() + ": is a character device" + kNotRegularFile);
  // resume's scan rejects it and names it, rather than hanging or reading forever
  auto scan = error_within(10, [&] {
    auto s = io::CheckpointStore(root / "ckpts").find_newest_complete();
    CHECK(!s.newest);
    REQUIRE(s.rejected.size() == 1);
    CHECK(s.rejected[0].find(manifest.string() + ": is a character device") != std::string::npos);
  });
  CHECK(scan.empty());
  fs::remove(manifest);
  write_file(manifest, "{}");
  fs::resize_file(manifest, 17u << 20);  // sparse: 17 MiB
  CHECK(error_within(10, [&] { io::verify_checkpoint(step); }) ==
        manifest.string() + ": is 17.0 MiB, more than the 16.0 MiB a checkpoint manifest may have");
  // a listed file replaced by a FIFO, or a link to /dev/zero, is not read (it would block the
  // checksum, or never end) and is named for what it is; a file that is not there is missing
  fs::remove(manifest);
  saved_checkpoint(root);  // step-1 again, intact
  fs::remove(step / "model.safetensors");
  REQUIRE(make_fifo(step / "model.safetensors"));
  CHECK(error_within(10, [&] { io::verify_checkpoint(step); }) ==
        (step / "model.safetensors").string() + ": is a FIFO (named pipe), not the regular file manifest.json lists");
  fs::remove(step / "model.safetensors");
  fs::create_symlink("/dev/zero", step / "model.safetensors");
  CHECK(error_within(10, [&] { io::verify_checkpoint(step); }) ==
        (step / "model.safetensors").string() + ": is a character device, not the regular file manifest.json lists");
  fs::remove(step / "model.safetensors");
  CHECK(error_within(10, [&] { io::verify_checkpoint(step); }) ==
        (step / "model.safetensors").string() + ": missing (listed in manifest.json)");
}
