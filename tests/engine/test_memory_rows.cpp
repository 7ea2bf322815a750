// The strategies' memory plans (DataParallel's seam: strategy_memory_plan): the rows `trainer check
// --memory` prints for each dist.sharding, named and valued as the table printed them before the
// strategies owned their plans (the labels below are that table's, from `trainer launch -n 2 --
// check --memory`), and the same figures train.batch_size auto adds up.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/parallel/data_parallel.hpp"
#include "engine/startup/memory_plan.hpp"
#include "models/model_test_util.hpp"

using namespace trainer;
using namespace trainer::engine;

namespace {

std::vector<std::string> labels(const MemoryPlan& p) {
  std::vector<std::string> out;
  for (const auto& r : p.rows) out.push_back(r.label);
  return out;
}

std::vector<int64_t> row_bytes_of(const MemoryPlan& p) {
  std::vector<int64_t> out;
  for (const auto& r : p.rows) out.push_back(r.bytes);
  return out;
}

MemoryPlan plan_for(config::Sharding s, int64_t world, const models::Model& m, const config::OptimConfig& o) {
  config::DistConfig d;
  d.sharding = s;
  return strategy_memory_plan(d, world, m, o);
}

}  // namespace

TEST_CASE("memory plan rows: each strategy names and values its own rows", "[unit]") {
  auto model = test::make_model(test::tiny_gpt_cfg());
  config::OptimConfig adamw;
  adamw.name = config::OptimizerKind::Adamw;
  using S = config::Sharding;
  const std::vector<std::string> replicated = {"parameters", "gradients (inside the step)", "optimizer state (adamw)",
                                               "DDP gradient buckets"};
  for (auto s : {S::None, S::Optimizer, S::Gradients, S::Full})  // a single process shards nothing
    CHECK(labels(plan_for(s, 1, *model, adamw)) == replicated);
  CHECK(labels(plan_for(S::None, 2, *model, adamw)) == replicated);
  CHECK(labels(plan_for(S::Optimizer, 2, *model, adamw)) ==
        std::vector<std::string>{"parameters", "gradients (inside the step)", "optimizer state (adamw, 1/2 each)",
                                 "DDP gradient buckets"});
  CHECK(labels(plan_for(S::Gradients, 2, *model, adamw)) ==
        std::vector<std::string>{"parameters", "gradients (inside the step)", "optimizer state (adamw, 1/2 each)",
                                 "gradient shard (ZeRO-2)"});
  CHECK(labels(plan_for(S::Full, 2, *model, adamw)) ==
        std::vector<std::string>{"parameters (1/2 each)", "gathered units (first + 2 x largest)",
                                 "gradients (inside the step)", "optimizer state (adamw, 1/2 each)",
                                 "gradient shard (ZeRO-3)"});
  config::OptimConfig sgd;
  sgd.name = config::OptimizerKind::Sgd;
  CHECK(plan_for(S::Full, 4, *model, sgd).rows.at(3).label == "optimizer state (sgd, 1/4 each)");
  // the rows carry the plan's figures, and the figures are fixed_memory's
  for (auto s : {S::None, S::Optimizer, S::Gradients, S::Full}) {
    const auto p = plan_for(s, 4, *model, adamw);
    const auto& f = p.fixed;
    const auto fm = fixed_memory(*model, adamw, 4, s);
    CHECK(f.total() == fm.total());
    CHECK(f.gathered == fm.gathered);
    std::vector<int64_t> want = {f.parameters, f.gradients, f.optimizer, f.ddp_buckets};
    if (s == S::Full) want.insert(want.begin() + 1, f.gathered);
    CHECK(row_bytes_of(p) == want);
  }
}
