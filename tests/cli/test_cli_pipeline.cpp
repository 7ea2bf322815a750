// dist.pipeline_parallel at the command line: `trainer check` prints the stages, each rank's schedule
// checked and drawn with its bubble, and the (pp, dp, tp) mesh of a launched job; `trainer run`
// trains them (tests/dist/test_pp_train.cpp).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <regex>

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
  // `check` plans a layout without its ranks (exit 0), and says that `run` at this world size refuses it
  CHECK(r.output.find("`trainer run` at this world size, 1, refuses this config (exit 2)") != std::string::npos);
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
  // train.batch_size auto counts the data-parallel ranks too, as the run does (it said "x 4 ranks")
  auto a = run_trainer("launch -n 4 -- check " + pp_tiny_gpt(dir) +
                       " --no-data --set train.batch_size=auto --set train.global_batch_size=16");
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  CHECK(a.output.find("global batch 16 = micro-batch auto (the largest that fits, chosen at start) x accumulation x 2 "
                      "data-parallel ranks (dist.tensor_parallel 1, dist.pipeline_parallel 2)") != std::string::npos);
}

// The activations row: one microbatch per stage measured, times what the schedule holds at its peak.
// On pp rank 0 (stage 0) GPipe runs all 4 forwards before a backward, 1F1B holds 2 (P): the same
// measured microbatch, so exactly twice the bytes.
TEST_CASE("check --memory at pp 2: each rank's stages, the other stages released, the activations its schedule holds",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("cli_pp_memory");
  const auto cfg = pp_tiny_gpt(dir);
  std::map<std::string, std::string> out;
  for (const std::string sched : {"gpipe", "1f1b"}) {
    auto r = run_trainer("check " + cfg + " --no-data --memory --set train.precision=fp32 --set dist.pipeline.microbatches=4"
                         " --set dist.pipeline.schedule=" + sched);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("memory per process, pipeline parallel 2 (fp32, fp32 weights and optimizer state): one "
                        "microbatch of 2 samples through each stage measured by the CPU counting allocator, then "
                        "each rank's " + sched + " list of 4 microbatches a step replayed") != std::string::npos);
    CHECK(r.output.find("one microbatch's activations: stage 0 ") != std::string::npos);
    CHECK(r.output.find("largest other unit (host, at start-up)") != std::string::npos);
    out[sched] = r.output;
  }
  // "microbatches held at the peak   <rank 0>   <rank 1>"
  auto held = [](const std::string& text) {
    std::smatch m;
    REQUIRE(std::regex_search(text, m, std::regex(R"(microbatches held at the peak\s+(\d+)\s+(\d+))")));
    return std::make_pair(std::stoi(m[1]), std::stoi(m[2]));
  };
  CHECK(held(out["gpipe"]).first == 4);
  CHECK(held(out["1f1b"]).first == 2);
  auto act = [](const std::string& text) {
    std::smatch m;
    REQUIRE(std::regex_search(text, m, std::regex(R"(activations at the peak \(measured x held\)\s+([\d.]+) (\w+))")));
    return std::make_pair(std::stod(m[1]), std::string(m[2]));
  };
  const auto g = act(out["gpipe"]), f = act(out["1f1b"]);
  REQUIRE(g.second == f.second);
  CHECK(std::abs(g.first - 2 * f.first) <= 0.011 * g.first);  // the figures are printed with 3 digits
}
