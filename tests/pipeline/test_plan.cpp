// A run's pipeline plan from its config (pipeline/plan.hpp): the stages auto-balanced from the
// family's unit costs or taken from the list, microbatches auto, and what `trainer check` prints.
#include <catch2/catch.hpp>

#include "config/load.hpp"
#include "pipeline/plan.hpp"
#include "pipeline/unit_range_print.hpp"

using namespace trainer;
using namespace trainer::pipeline;
using Catch::Matchers::Contains;

namespace plan_test {  // named: the unity build joins the pipeline tests
config::RunConfig gpt(int64_t n_layer, int64_t P) {
  config::RunConfig c;
  c.model.arch = "gpt";
  c.model.n_layer = n_layer;
  c.model.n_embd = 64;
  c.model.n_head = 4;
  c.model.block_size = 64;
  c.model.vocab_size = 256;
  c.train.batch_size = 12;
  c.dist.pipeline_parallel = P;
  return c;
}
}  // namespace plan_test

using namespace plan_test;

TEST_CASE("plan: auto stages balance GPT's units by cost, the embeddings and head counted", "[unit][pipeline]") {
  // block: 64 x 24 x 64^2 + 4 x 64^2 x 64 = 7.3 MFLOP; head: 64 x (2 x 256 x 64 + 320) = 2.1; embeddings 0.008
  const auto plan = make_plan(gpt(5, 2));
  REQUIRE(plan.units.size() == 7);
  CHECK(plan.units.front().name == "embeddings");
  CHECK(plan.units[3].name == "transformer.h.2");
  CHECK(plan.units.back().name == "head");
  CHECK(plan.stages == std::vector<UnitRange>{{0, 3}, {4, 6}});  // 3 blocks | 2 blocks + head
  CHECK(plan.balanced);
  CHECK(plan.shape.microbatches == 4);  // the largest divisor of 12 up to 2 x P
  const auto four = make_plan(gpt(6, 4));
  CHECK(four.stages.size() == 4);
  CHECK(four.shape.microbatches == 6);
}

TEST_CASE("plan: microbatches auto divides the batch, an explicit count is kept", "[unit][pipeline]") {
  auto c = gpt(4, 2);
  c.train.batch_size = 7;  // prime: no divisor up to 4 but 1
  CHECK(config::pipeline_microbatches(c) == 1);
  c.train.batch_size = 8;
  CHECK(config::pipeline_microbatches(c) == 4);
  c.dist.pipeline.microbatches = 2;
  CHECK(config::pipeline_microbatches(c) == 2);
  c.dist.pipeline_parallel = 1;
  c.dist.pipeline.microbatches = 0;
  CHECK(config::pipeline_microbatches(c) == 1);
}

TEST_CASE("plan: trainer check's text names each stage's units, the schedule's check and its bubble", "[unit][pipeline]") {
  auto c = gpt(5, 2);
  c.dist.pipeline.microbatches = 4;
  c.dist.pipeline.schedule = config::PipeSchedule::GPipe;
  const auto text = describe_plan(make_plan(c));
  INFO(text);
  CHECK_THAT(text, Contains("pipeline: 2 stages on 2 ranks (stages auto: balanced by estimated forward FLOPs), 4 "
                            "microbatches a batch, schedule gpipe"));
  CHECK_THAT(text, Contains("stage 0 on pp rank 0: units 0-3 (embeddings .. transformer.h.2), "));
  CHECK_THAT(text, Contains("stage 1 on pp rank 1: units 4-6 (transformer.h.3 .. head), "));
  CHECK_THAT(text, Contains("schedule check: legal"));
  // GPipe at P 2, M 4: (P - 1) / (M + P - 1) = 1 / 5 of rank-time idle
  CHECK_THAT(text, Contains("bubble 20.0 % of rank-time"));
  // rank 0: four forwards, then idle while rank 1 runs its forwards and first backward (3 units)
  CHECK_THAT(text, Contains("rank  0 |F0F1F2F3......B"));
  CHECK_THAT(text, Contains("| peak activations 4\n"));
  c.dist.pipeline.stages = {"0-1", "2-6"};
  CHECK_THAT(describe_plan(make_plan(c)), Contains("(dist.pipeline.stages)") &&
                                               Contains("stage 0 on pp rank 0: units 0-1 (embeddings .. transformer.h.0)"));
  c.dist.pipeline.stages = {"0-1", "3-6"};
  CHECK_THROWS_WITH(make_plan(c), Contains("dist.pipeline.stages: no stage holds transformer.h.1"));
  c.model.arch = "resnet";
  CHECK_THROWS_WITH(make_plan(c), Contains("model.arch resnet has no pipeline stages"));
}
