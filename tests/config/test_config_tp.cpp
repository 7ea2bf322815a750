// dist.tensor_parallel / dist.sequence_parallel: every refusal names file:line:col, the key path and
// why, before anything starts (exit 2 at the command line).
#include <catch2/catch.hpp>

#include "config/load.hpp"
#include "test_util.hpp"

using namespace trainer::config;

namespace {

std::vector<std::string> tp_errors_of(const std::string& yaml, int64_t world = 1, bool builds_mesh = true) {
  auto dir = trainer::test::scratch_dir("config_tp");
  auto file = dir / "exp.yaml";
  trainer::test::write_file(file, yaml);
  ValidateOptions opts;
  opts.world_size = world;
  opts.builds_mesh = builds_mesh;
  std::vector<std::string> out;
  try {
    load_and_validate(file.string(), {}, opts);
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) {
      std::string s = d.str();
      auto p = s.find("exp.yaml");
      out.push_back(p == std::string::npos ? s : s.substr(p));
    }
  }
  return out;
}

// lines 1-12; "dist:" is line 13, its first key line 14
const std::string kTpGpt =
    "model:\n  arch: gpt\n  vocab_size: 64\n  block_size: 10\n  n_layer: 1\n  n_head: 6\n  n_embd: 12\n"
    "train:\n  max_steps: 10\n  batch_size: 2\ndata:\n  format: synthetic\n";
std::string tp_with_dist(const std::string& head, const std::string& dist) { return head + "dist:\n" + dist; }

}  // namespace

TEST_CASE("tensor parallel: a GPT whose heads, MLP width or sequence do not divide by T is refused", "[unit]") {
  CHECK(tp_errors_of(tp_with_dist(kTpGpt, "  tensor_parallel: 3\n"), 3).empty());
  CHECK(tp_errors_of(tp_with_dist(kTpGpt, "  tensor_parallel: 2\n  sequence_parallel: true\n"), 2).empty());
  auto e = tp_errors_of(tp_with_dist(kTpGpt, "  tensor_parallel: 4\n"), 4);
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:14:3: dist.tensor_parallel: model.n_head 6 does not divide by 4 (attention is split over "
                "the ranks by whole heads)");
  e = tp_errors_of(tp_with_dist(kTpGpt, "  tensor_parallel: 32\n"), 32);
  REQUIRE(e.size() == 2);
  CHECK(e[1] == "exp.yaml:14:3: dist.tensor_parallel: the MLP width 4 x model.n_embd = 48 does not divide by 32");
  e = tp_errors_of(tp_with_dist(kTpGpt, "  tensor_parallel: 3\n  sequence_parallel: true\n"), 3);
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:15:3: dist.sequence_parallel: model.block_size 10 does not divide by dist.tensor_parallel 3 "
                "(each rank holds 1/T of the sequence)");
}

TEST_CASE("tensor parallel: sequence parallel alone has no effect, and T must fit the launcher's world", "[unit]") {
  auto e = tp_errors_of(tp_with_dist(kTpGpt, "  sequence_parallel: true\n"));
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:14:3: dist.sequence_parallel: has no effect without dist.tensor_parallel > 1");
  e = tp_errors_of(tp_with_dist(kTpGpt, "  tensor_parallel: 2\n"), 3);
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:14:3: dist.tensor_parallel: 2 does not divide the world size 3 (the launcher's ranks): the "
                "mesh is world / T data-parallel groups of T ranks");
  CHECK(tp_errors_of(tp_with_dist(kTpGpt, "  tensor_parallel: 2\n"), 1, /*builds_mesh=*/false).empty());  // eval, predict
  // 2-D: data parallel 2 x tensor parallel 2, replicated or sharded over dp (and at dp 1 sharding nothing)
  CHECK(tp_errors_of(tp_with_dist(kTpGpt, "  tensor_parallel: 2\n"), 4).empty());
  for (const char* s : {"optimizer", "gradients", "full"}) {
    CHECK(tp_errors_of(tp_with_dist(kTpGpt, std::string("  tensor_parallel: 2\n  sharding: ") + s + "\n"), 4).empty());
    CHECK(tp_errors_of(tp_with_dist(kTpGpt, std::string("  tensor_parallel: 2\n  sharding: ") + s +
                                                "\n  sequence_parallel: true\n"), 4).empty());
  }
}

TEST_CASE("tensor parallel: what is not wired with T > 1 is refused at its key", "[unit]") {
  auto e = tp_errors_of(tp_with_dist(kTpGpt, "  tensor_parallel: 2\n  recovery: in_process\n"), 2);
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:15:3: dist.recovery: in_process with dist.tensor_parallel 2 is not supported (a regroup does "
                "not rebuild the mesh's groups); use restart");
  // train.ema and train.batch_size auto take the mesh into account (tests/dist/test_tp_features.cpp)
  std::string ema = kTpGpt;
  ema.replace(ema.find("batch_size: 2"), 13, "batch_size: auto\n  global_batch_size: 4");
  ema.insert(ema.find("data:"), "  ema:\n    decay: 0.9\n");  // under train:
  e = tp_errors_of(tp_with_dist(ema, "  tensor_parallel: 2\n"), 2);
  INFO((e.empty() ? std::string() : e[0]));
  CHECK(e.empty());
}

TEST_CASE("tensor parallel: ResNet with T > 1 is refused, saying what to use instead", "[unit]") {
  const std::string resnet = "model:\n  arch: resnet\n  depth: 20\n  num_classes: 10\n  in_channels: 3\n"
                             "train:\n  max_steps: 10\ndata:\n  format: synthetic\ndist:\n  tensor_parallel: 2\n";
  auto e = tp_errors_of(resnet, 2);
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:11:3: dist.tensor_parallel: ResNet has no tensor-parallel layers: use dist.sharding: full to "
                "cut memory instead");
}

TEST_CASE("tensor parallel: a ViT whose heads or MLP width do not divide by T, or with sequence parallel, is refused",
          "[unit]") {
  // "dist:" is line 15, its first key line 16
  const std::string vit = "model:\n  arch: vit\n  image_size: 8\n  patch_size: 4\n  num_layers: 1\n  num_heads: 2\n"
                          "  hidden_dim: 8\n  mlp_dim: 16\ntrain:\n  max_steps: 10\ndata:\n  format: synthetic\n"
                          "  synthetic:\n    image_size: 8\ndist:\n";
  CHECK(tp_errors_of(vit + "  tensor_parallel: 2\n", 2).empty());
  CHECK(tp_errors_of(vit + "  tensor_parallel: 2\n", 4).empty());  // dp 2 x tp 2
  auto e = tp_errors_of(vit + "  tensor_parallel: 4\n", 4);
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:16:3: dist.tensor_parallel: model.num_heads 2 does not divide by 4 (attention is split over "
                "the ranks by whole heads)");
  e = tp_errors_of(vit + "  tensor_parallel: 3\n", 3);
  REQUIRE(e.size() == 2);
  CHECK(e[1] == "exp.yaml:16:3: dist.tensor_parallel: the MLP width model.mlp_dim = 16 does not divide by 3");
  e = tp_errors_of(vit + "  tensor_parallel: 2\n  sequence_parallel: true\n", 2);
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:17:3: dist.sequence_parallel: ViT has no sequence-parallel layout (its sequence, the patches "
                "and the class token, seldom divides by dist.tensor_parallel 2): leave it off");
}
