// WorldRecovery (engine/world_recovery.hpp): what dist.recovery in_process decides for a given step
// state, without processes: the samples counted over world changes, what a failure at each point of
// a step leaves to redo, who writes after a regroup, and a world of one's step bookkeeping.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "engine/loop/world_recovery.hpp"

using namespace trainer;
using namespace trainer::engine;

TEST_CASE("world recovery: samples are counted at the world that ran each stretch of steps", "[unit]") {
  SampleCount n(/*per_step=*/16);  // 4 ranks x 2 x 2
  CHECK(n.at(10) == 160);
  n.change(10, 12);  // a rank lost after step 10: 3 ranks
  CHECK(n.per_step() == 12);
  CHECK(n.at(10) == 160);
  CHECK(n.at(15) == 160 + 5 * 12);
  n.change(15, 16);  // grown back
  CHECK(n.at(20) == 160 + 60 + 80);
  SampleCount joiner(0);
  joiner.start_at(42);  // a replacement counts from the step it joined at
  joiner.change(42, 8);
  CHECK(joiner.at(42) == 0);
  CHECK(joiner.at(45) == 24);
}

TEST_CASE("world recovery: a failure before the commit vote draws the step's micro-batches again", "[unit]") {
  const data::LoaderState start{2, 64}, now{2, 96};
  // failed inside the step (gradient sync or the vote): abandoned, the loader goes back
  auto a = after_failure(StepProgress{.step_done = false, .recorded = true}, now, start, false);
  CHECK(a.loader == start);
  CHECK_FALSE(a.redo_record);
  // failed after the step was committed, before its record: the step counts, the record is redone
  auto b = after_failure(StepProgress{.step_done = true, .recorded = false}, now, start, false);
  CHECK(b.loader == now);
  CHECK(b.redo_record);
  // failed after the record (checkpoint, evaluation): nothing to redo
  auto c = after_failure(StepProgress{.step_done = true, .recorded = true}, now, start, false);
  CHECK(c.loader == now);
  CHECK_FALSE(c.redo_record);
  // a record still pending from an earlier failure stays pending through a second one
  CHECK(after_failure(StepProgress{.step_done = false, .recorded = true}, now, start, true).redo_record);
}

TEST_CASE("world recovery: the new rank 0 takes over writing only when rank 0 was lost", "[unit]") {
  auto regrouped = [](int64_t old_rank, int64_t rank) {
    dist::DistContext::Regrouped g;
    g.old_rank = old_rank;
    g.rank = rank;
    return g;
  };
  CHECK(takes_over_writing(regrouped(1, 0)));
  CHECK_FALSE(takes_over_writing(regrouped(0, 0)));  // rank 0 survived: it goes on writing
  CHECK_FALSE(takes_over_writing(regrouped(2, 1)));
}

namespace {
// The trainer's wiring, counted: a world of one never rebuilds, grows or sends its state.
class CountingParts final : public WorldParts {
 public:
  int rebuilt = 0;
  data::LoaderState pos{0, 8};
  void rebuild_world(const data::LoaderState&) override { ++rebuilt; }
  data::LoaderState loader_state() const override { return pos; }
  RunObjects objects() override { throw std::logic_error("a world of one sends no state"); }
  RunPosition position(int64_t) const override { return {}; }
  int64_t last_logged_step() const override { return -1; }
};
}  // namespace

TEST_CASE("world recovery: a world of one steps, records and agrees alone", "[unit]") {
  config::RunConfig cfg;
  cfg.train.batch_size = 4;
  cfg.train.grad_accum = 3;
  auto ctx = dist::DistContext::create(dist::LaunchEnv{}, cfg.dist, torch::Device(torch::kCPU), "h");
  REQUIRE_FALSE(ctx->active());
  CountingParts parts;
  WorldRecovery r(*ctx, dist::LaunchEnv{}, cfg, "h", parts, torch::kCPU);
  CHECK(r.samples_per_step() == 12);
  CHECK(r.grad_accum() == 3);
  CHECK(r.env().world_size == 1);  // the launcher's, until a regroup renumbers it
  CHECK_FALSE(r.joined());
  CHECK_FALSE(r.record_pending());
  r.reset_progress();
  r.begin_step(parts.pos);
  const auto norm = torch::tensor(1.5);
  r.step_ran(/*steps_done=*/1, /*log_step=*/true, norm);
  CHECK(r.last_step_world() == 1);
  CHECK(r.last_grad_norm().item<double>() == 1.5);
  r.recorded(/*logged=*/true);
  CHECK(r.samples_at(5) == 60);
  // no signal and no recovery store: no stop, nobody to admit; one process looks at its data files on
  // the boundary steps as several ranks do (the loader's own look covers the training files at epoch
  // boundaries only), and what it finds is the boundary's change
  bool looked = false;
  const auto b = r.agree_stop(/*step=*/10, /*log_step=*/false, /*final_step=*/false, /*data_due=*/true, [&] {
    looked = true;
    return std::string("changed");
  });
  CHECK_FALSE(b.stop);
  CHECK(b.data_change == "changed");
  CHECK(looked);
  CHECK_FALSE(r.grow_due());
  // a step that is no boundary (not logged, not a multiple of 10, no epoch begins): no look
  looked = false;
  const auto quiet = r.agree_stop(/*step=*/11, /*log_step=*/false, /*final_step=*/false, /*data_due=*/false, [&] {
    looked = true;
    return std::string("changed");
  });
  CHECK(quiet.data_change.empty());
  CHECK_FALSE(looked);
  CHECK(parts.rebuilt == 0);
}

TEST_CASE("world recovery: a step given up is redone with its own random draws", "[unit]") {
  config::RunConfig cfg;
  cfg.train.batch_size = 4;
  auto ctx = dist::DistContext::create(dist::LaunchEnv{}, cfg.dist, torch::Device(torch::kCPU), "h");
  CountingParts parts;
  WorldRecovery r(*ctx, dist::LaunchEnv{}, cfg, "h", parts, torch::kCPU);
  torch::manual_seed(7);
  r.reset_progress();
  r.begin_step(parts.pos);
  const auto drawn = torch::rand({4});  // the step's draws (its dropout key, ...)
  CHECK(r.give_up_step().samples_consumed == parts.pos.samples_consumed);
  CHECK(torch::equal(torch::rand({4}), drawn));  // drawn again, not the next ones
  // a step that ran on every rank keeps its draws: the next step draws on
  r.begin_step(parts.pos);
  const auto first = torch::rand({4});
  r.step_ran(/*steps_done=*/1, /*log_step=*/false, torch::tensor(1.0));
  r.give_up_step();
  CHECK_FALSE(torch::equal(torch::rand({4}), first));
}
