// A checkpoint group in parts (io/tensor_parts.hpp): each part's slices under global names with their
// ranges assemble into the global tensors bit for bit (GPT's fused q|k|v rows by heads, a padded
// vocabulary's last part short, a replicated tensor in part 0 alone), and every way the parts can
// disagree is a CheckpointError naming the file and the tensor.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "io/tensor_parts.hpp"
#include "test_util.hpp"

using namespace trainer;
using io::PartRanges;

namespace {

io::SafetensorsFile part(const std::string& path, io::NamedTensors tensors, const std::map<std::string, PartRanges>& r) {
  io::SafetensorsFile f;
  f.path = path;
  f.tensors = std::move(tensors);
  if (!r.empty()) f.metadata[io::kRangesKey] = io::encode_ranges(r);
  return f;
}

std::string assemble_error(const std::vector<io::SafetensorsFile>& parts) {
  try {
    (void)io::assemble_parts(parts);
  } catch (const io::CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parts assemble into the global tensors bit for bit: q|k|v rows by heads, a padded tail, a whole tensor",
          "[unit]") {
  torch::manual_seed(0);
  const auto qkv = torch::randn({12, 4});  // 3 blocks of 4 rows, 2 heads of 2 rows each
  const auto vocab = torch::randn({5, 4});  // 5 rows over 2 parts padded to 6: part 1 holds rows 3-4
  const auto ln = torch::randn({4});
  const std::vector<std::pair<int64_t, int64_t>> r0 = {{0, 2}, {4, 6}, {8, 10}}, r1 = {{2, 4}, {6, 8}, {10, 12}};
  auto cut = [&](const std::vector<std::pair<int64_t, int64_t>>& rs) {
    std::vector<torch::Tensor> pieces;
    for (auto [b, e] : rs) pieces.push_back(qkv.narrow(0, b, e - b));
    return torch::cat(pieces);
  };
  auto p0 = part("m-part0of2", {{"qkv", cut(r0)}, {"wte", vocab.narrow(0, 0, 3)}, {"ln", ln}},
                 {{"qkv", {0, {12, 4}, r0}}, {"wte", {0, {5, 4}, {{0, 3}}}}});
  auto p1 = part("m-part1of2", {{"qkv", cut(r1)}, {"wte", vocab.narrow(0, 3, 2)}},
                 {{"qkv", {0, {12, 4}, r1}}, {"wte", {0, {5, 4}, {{3, 5}}}}});
  const auto out = io::assemble_parts({p0, p1});
  std::map<std::string, torch::Tensor> got(out.begin(), out.end());
  REQUIRE(got.size() == 3);
  CHECK(torch::equal(got.at("qkv"), qkv));
  CHECK(torch::equal(got.at("wte"), vocab));
  CHECK(torch::equal(got.at("ln"), ln));
  CHECK(out.front().first == "qkv");  // part 0's order

  // the ranges round-trip through the metadata text
  CHECK(p0.metadata.at(io::kRangesKey).find("\"ranges\":[[0,2],[4,6],[8,10]]") != std::string::npos);
  CHECK(io::part_group_name("optimizer", 1, 4) == "optimizer-part1of4");
}

TEST_CASE("parts that disagree are refused naming the file and the tensor", "[unit]") {
  const auto a = torch::zeros({2, 3}), b = torch::ones({2, 3});
  auto p0 = part("p0", {{"w", a}}, {{"w", {0, {4, 3}, {{0, 2}}}}});
  auto p1 = part("p1", {{"w", b}}, {{"w", {0, {4, 3}, {{2, 4}}}}});
  CHECK(assemble_error({p0, p1}).empty());

  // a gap (rows 2-3 never written) and an overlap (rows 0-1 twice)
  auto gap = part("p1", {{"w", b.narrow(0, 0, 1)}}, {{"w", {0, {4, 3}, {{2, 3}}}}});
  CHECK(assemble_error({p0, gap}) == "p0: w: its parts do not cover each of its 4 rows along dim 0 exactly once");
  auto twice = part("p1", {{"w", b}}, {{"w", {0, {4, 3}, {{0, 2}}}}});
  CHECK(assemble_error({p0, twice}) == "p0: w: its parts do not cover each of its 4 rows along dim 0 exactly once");
  // a range outside the global tensor, and a slice of the wrong length for its ranges
  auto outside = part("p1", {{"w", b}}, {{"w", {0, {4, 3}, {{3, 5}}}}});
  CHECK(assemble_error({p0, outside}) == "p1: w: range [3, 5) outside the global [4, 3] along dim 0");
  auto short_slice = part("p1", {{"w", b.narrow(0, 0, 1)}}, {{"w", {0, {4, 3}, {{2, 4}}}}});
  CHECK(assemble_error({p0, short_slice}) == "p1: w: holds shape [1, 3], its ranges of the global [4, 3] make 2 along dim 0");
  // another global shape in another part; a whole tensor in two parts; ranges naming no tensor
  auto other = part("p1", {{"w", torch::ones({2, 2})}}, {{"w", {0, {4, 2}, {{2, 4}}}}});
  CHECK(assemble_error({p0, other}).find("p1: w: global shape [4, 2] along dim 0, another part says [4, 3]") == 0);
  auto whole = part("p1", {{"w", b}, {"ln", torch::ones({3})}}, {{"w", {0, {4, 3}, {{2, 4}}}}});
  CHECK(assemble_error({p0, whole}).empty());  // a pipeline stage's part holds its own whole tensors
  auto p0ln = part("p0", {{"w", a}, {"ln", torch::zeros({3})}}, {{"w", {0, {4, 3}, {{0, 2}}}}});
  CHECK(assemble_error({p0ln, whole}) == "p1: ln: a whole tensor that another part holds too");
  auto ghost = part("p1", {{"w", b}}, {{"w", {0, {4, 3}, {{2, 4}}}}, {"v", {0, {4, 3}, {{2, 4}}}}});
  CHECK(assemble_error({p0, ghost}) == "p1: its ranges name 'v', a tensor it does not hold");
  auto bad = p1;
  bad.metadata[io::kRangesKey] = "{not json";
  CHECK(assemble_error({p0, bad}).find("p1: malformed 'tensor_ranges' metadata") == 0);
}

TEST_CASE("a checkpoint folder's group in parts loads assembled, and a missing part is named", "[unit]") {
  auto dir = test::scratch_dir("tensor_parts");
  const auto w = torch::arange(12, torch::kFloat32).reshape({4, 3});
  io::save_safetensors((dir / "model-part0of2.safetensors").string(), {{"w", w.narrow(0, 0, 2).contiguous()}},
                       {{io::kRangesKey, io::encode_ranges({{"w", {0, {4, 3}, {{0, 2}}}}})}});
  io::save_safetensors((dir / "model-part1of2.safetensors").string(), {{"w", w.narrow(0, 2, 2).contiguous()}},
                       {{io::kRangesKey, io::encode_ranges({{"w", {0, {4, 3}, {{2, 4}}}}})}});
  test::write_file(dir / "state.json", R"({"tensor_parts": {"parts": 2, "groups": ["model"]}})");
  const auto f = io::load_checkpoint_group(dir, "model");
  REQUIRE(f.tensors.size() == 1);
  CHECK(torch::equal(f.tensors[0].second, w));
  CHECK(f.metadata.count(io::kRangesKey) == 0);

  std::filesystem::remove(dir / "model-part1of2.safetensors");
  try {
    (void)io::load_checkpoint_group(dir, "model");
    FAIL("a missing part was not noticed");
  } catch (const io::CheckpointError& e) {
    CHECK(std::string(e.what()) == (dir / "model-part1of2.safetensors").string() + ": missing (state.json lists 2 parts of model)");
  }
  try {
    (void)io::load_checkpoint_group(dir, "ema");
    FAIL("a group that is not there was not noticed");
  } catch (const io::CheckpointError& e) {
    CHECK(std::string(e.what()) == (dir / "ema.safetensors").string() + ": missing");
  }
}

// Each file's metadata names the save that wrote it (step) and its group: a part from another step,
// re-signed into a folder, was assembled in silence (eval and export gave another step's figures).
TEST_CASE("a part or file from another save, or renamed from another part, is refused naming it", "[unit]") {
  auto dir = test::scratch_dir("tensor_parts_other_save");
  const auto w = torch::arange(12, torch::kFloat32).reshape({4, 3});
  auto write_part = [&](int64_t k, const std::string& step, const std::string& group) {
    io::save_safetensors((dir / ("model-part" + std::to_string(k) + "of2.safetensors")).string(),
                         {{"w", w.narrow(0, 2 * k, 2).contiguous()}},
                         {{io::kRangesKey, io::encode_ranges({{"w", {0, {4, 3}, {{2 * k, 2 * k + 2}}}}})},
                          {"step", step}, {"checkpoint_group", group}});
  };
  test::write_file(dir / "state.json", R"({"step": 8, "tensor_parts": {"parts": 2, "groups": ["model"]}})");
  write_part(0, "8", "model-part0of2");
  write_part(1, "8", "model-part1of2");
  CHECK(torch::equal(io::load_checkpoint_group(dir, "model").tensors[0].second, w));  // one save: loads
  auto error = [&] {
    try {
      (void)io::load_checkpoint_group(dir, "model");
    } catch (const io::CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto part1 = (dir / "model-part1of2.safetensors").string();
  write_part(1, "3", "model-part1of2");
  CHECK(error() == part1 + ": was written by the save of step 3 (its metadata), but this checkpoint is of step 8: a "
                           "file from another checkpoint");
  write_part(1, "8", "model-part0of2");
  CHECK(error() == part1 + ": holds checkpoint_group 'model-part0of2' (its metadata), not 'model-part1of2': a file "
                           "renamed from another part");
  // a whole file likewise
  std::filesystem::remove(dir / "model-part0of2.safetensors");
  std::filesystem::remove(part1);
  io::save_safetensors((dir / "model.safetensors").string(), {{"w", w}},
                       {{"step", "5"}, {"checkpoint_group", "model"}});
  CHECK(error() == (dir / "model.safetensors").string() +
                       ": was written by the save of step 5 (its metadata), but this checkpoint is of step 8: a file "
                       "from another checkpoint");
}
