// dist.pipeline_parallel at the command line: `trainer check` prints the stages, each rank's schedule
// checked and drawn with its bubble, and the (pp, dp, tp) mesh of a launched job; `trainer run`
// trains them (tests/dist/test_pp_train.cpp).
#include <catch2/catch.hpp>

#include <filesystem>

#include "test_util.hpp"

using trainer::test::run_trainer;
namespace fs = std::filesystem;

namespace {
std::string pp_tiny_gpt(const fs::path& dir) {
  const auto file = dir / "pp.yaml";
  trainer::test::write_file(file, "run: {name: pp, seed: 1}\n"
                                  "model: {arch: gpt, vocab_size: 64, block_size: 8, n_layer: 3, n_head: 2, n_embd: 16}\n"
                                  "data: {format: synthetic}\n"
                                  "train: {batch_size: 8, max_steps: 3}\n"
                                  "dist: {pipeline_parallel: 2}\n");
  return file.string();
}
}  // namespace

TEST_CASE("check: a pipeline's stages, each rank's timeline and bubble, before any process runs", "[e2e]") {
  auto r = run_trainer("check " + trainer::test::source_path("configs/gpt2_124m.yaml") +
                       " --no-data --set dist.pipeline_parallel=4 --set dist.pipeline.schedule=zero_bubble"
                       " --set dist.pipeline.microbatches=8");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("pipeline: 4 stages on 4 ranks (stages auto: balanced by estimated forward FLOPs), 8 "
                      "microbatches a batch, schedule zero_bubble") != std::string::npos);
  CHECK(r.output.find("stage 0 on pp rank 0: units 0-") != std::string::npos);
  // GPT-2's head (the 50257-token logits, 2 x 50257 x 768 FLOPs a token) outweighs four blocks: a stage of its own
  CHECK(r.output.find("stage 3 on pp rank 3: units 13 (head), ") != std::string::npos);
  CHECK(r.output.find("stage 1 on pp rank 1: units 5-8 (transformer.h.4 .. transformer.h.7), ") != std::string::npos);
  CHECK(r.output.find("schedule check: legal") != std::string::npos);
  CHECK(r.output.find("rank  3 |") != std::string::npos);
  CHECK(r.output.find("% of rank-time") != std::string::npos);
  CHECK(r.output.find("device mesh: dist.pipeline_parallel x dist.tensor_parallel 4 needs a world of a multiple of 4 "
                      "ranks") != std::string::npos);
}

TEST_CASE("check under trainer launch: the (pp, dp, tp) coordinates of every rank", "[e2e][dist]") {
  auto dir = trainer::test::scratch_dir("cli_pp_launch");
  auto r = run_trainer("launch -n 4 -- check " + pp_tiny_gpt(dir) + " --no-data");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("device mesh: pp 2 x dp 2 x tp 1 (tp ranks consecutive, pp outermost)") != std::string::npos);
  CHECK(r.output.find("rank 1: pp 0, dp 1, tp 0, node 0") != std::string::npos);
  CHECK(r.output.find("rank 2: pp 1, dp 0, tp 0, node 0") != std::string::npos);
  CHECK(r.output.find("effective global batch 16 = 8 per rank x 1 accumulation x 2 data-parallel ranks") !=
        std::string::npos);
}
