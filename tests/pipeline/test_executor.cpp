// The executor runs each schedule's lists on P ranks (threads over in-process queues) and gives one
// process's gradient accumulation: the same losses and every parameter's gradient, fp64, for uneven
// stages and M < P; a loss scale reaches every stage's gradients exactly. A rank that waits too long
// names its action; a list out of order is named.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <algorithm>

#include "pipeline/executor.hpp"
#include "pipeline/partition.hpp"
#include "pipeline/pipeline_mlp.hpp"
#include "pipeline/queue_link.hpp"

using namespace trainer::pipeline;
using namespace trainer::test::pipeline_mlp;
using trainer::test::Mailboxes;
using trainer::test::QueueLink;
using Catch::Matchers::Contains;

namespace {

struct PipelineRun {
  double loss_sum = 0;
  int64_t losses = 0;
  std::vector<Mlp> nets;  // per rank: its copy, gradients in its own stages' layers
};

PipelineRun run_pipeline(Schedule kind, const PipelineShape& sh, const Mlp& init, const Program& prog, double timeout_s = 30,
                         const torch::Tensor& loss_scale = {}) {
  const auto split = balance_stages(std::vector<double>(kLayers, 1.0), sh.stages());
  PipelineRun out;
  out.nets.reserve(static_cast<size_t>(sh.ranks));
  for (int64_t r = 0; r < sh.ranks; ++r) out.nets.emplace_back(init);
  Mailboxes box;
  std::vector<StepResult> results(static_cast<size_t>(sh.ranks));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(sh.ranks));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < sh.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        const auto stages = stages_of(out.nets[static_cast<size_t>(r)], sh, r);
        QueueLink link(box, r, timeout_s);
        Executor ex(sh, r, stages, link);
        ex.set_loss_scale(loss_scale);
        results[static_cast<size_t>(r)] = ex.run(prog[static_cast<size_t>(r)], [](int64_t m) { return batch(m); });
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (const auto& r : results) {
    out.loss_sum += r.loss_value();
    out.losses += r.losses;
  }
  (void)kind;
  return out;
}

}  // namespace

TEST_CASE("every schedule's pipeline equals one process's gradient accumulation (fp64)", "[unit][pipeline]") {
  const Mlp init(11);
  for (Schedule kind : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved1F1B, Schedule::ZeroBubble})
    for (int64_t P : {1, 2, 3})
      for (int64_t M : {1, 2, 5}) {
        const int64_t v = kind == Schedule::Interleaved1F1B && P * 2 <= kLayers ? 2 : 1;
        const PipelineShape sh{P, M, v};
        INFO(schedule_name(kind) << " P=" << P << " M=" << M << " v=" << v);
        Mlp ref(init);
        const double want = reference(ref, M);
        const auto got = run_pipeline(kind, sh, init, make_schedule(kind, sh));
        CHECK(got.losses == M);
        CHECK(got.loss_sum == Approx(want).epsilon(1e-13));
        const auto split = balance_stages(std::vector<double>(kLayers, 1.0), sh.stages());
        for (int64_t s = 0; s < sh.stages(); ++s)
          for (int64_t i = split[static_cast<size_t>(s)].first; i <= split[static_cast<size_t>(s)].last; ++i) {
            const auto& net = got.nets[static_cast<size_t>(sh.rank_of(s))];
            INFO("layer " << i);
            REQUIRE(net.w[i].grad().defined());
            CHECK(torch::allclose(net.w[i].grad(), ref.w[i].grad(), 1e-12, 1e-14));
            CHECK(torch::allclose(net.b[i].grad(), ref.b[i].grad(), 1e-12, 1e-14));
          }
        // a rank's copy of the other stages' layers got no gradient: each stage is its own
        for (int64_t s = 0; s < sh.stages(); ++s)
          for (int64_t r = 0; r < P; ++r)
            if (sh.rank_of(s) != r) CHECK_FALSE(got.nets[static_cast<size_t>(r)].w[split[static_cast<size_t>(s)].first].grad().defined());
      }
}

TEST_CASE("fp16's loss scale: every stage's gradients carry it exactly, the losses stay unscaled", "[unit][pipeline]") {
  // a power of two scales fp64 exactly: the gradients are scale x one process's, bit for bit, on
  // every stage (the scale crossed each rank boundary with the gradients), and the logged loss is not scaled
  const Mlp init(5);
  const auto scale = torch::full({1}, 1024.0, torch::kFloat32);  // LossScaler's (1,) float32
  for (Schedule kind : {Schedule::GPipe, Schedule::OneFOneB, Schedule::ZeroBubble}) {
    const PipelineShape sh{3, 4, 1};
    INFO(schedule_name(kind));
    const auto plain = run_pipeline(kind, sh, init, make_schedule(kind, sh));
    const auto scaled = run_pipeline(kind, sh, init, make_schedule(kind, sh), 30, scale);
    CHECK(scaled.loss_sum == plain.loss_sum);
    const auto split = balance_stages(std::vector<double>(kLayers, 1.0), sh.stages());
    for (int64_t s = 0; s < sh.stages(); ++s)
      for (int64_t i = split[static_cast<size_t>(s)].first; i <= split[static_cast<size_t>(s)].last; ++i) {
        INFO("stage " << s << ", layer " << i);
        const auto r = static_cast<size_t>(sh.rank_of(s));
        CHECK(torch::equal(scaled.nets[r].w[i].grad(), plain.nets[r].w[i].grad() * 1024.0));
        CHECK(torch::equal(scaled.nets[r].b[i].grad(), plain.nets[r].b[i].grad() * 1024.0));
      }
  }
}

TEST_CASE("a rank that waits too long names the action and the peer it waits for", "[unit][pipeline]") {
  const PipelineShape sh{2, 2, 1};
  auto prog = make_schedule(Schedule::OneFOneB, sh);
  auto& r1 = prog[1];
  SECTION("a gradient never sent") {
    r1.erase(std::find(r1.begin(), r1.end(), Action{Op::SendGrad, 0, 1, 0}));
    CHECK_THROWS_WITH(run_pipeline(Schedule::OneFOneB, sh, Mlp(3), prog, 0.5),
                      Contains("pipeline rank 0 waited 0.5") && Contains("s at recv_grad s0 m1 from rank 1"));
  }
  SECTION("a gradient left out: the next one is not taken for it") {
    r1.erase(std::find(r1.begin(), r1.end(), Action{Op::SendGrad, 0, 0, 0}));
    CHECK_THROWS_WITH(run_pipeline(Schedule::OneFOneB, sh, Mlp(3), prog, 0.5),
                      Contains("pipeline rank 0 at recv_grad s0 m0 from rank 1 received the message of send_grad s0 m1"));
  }
}

TEST_CASE("an action list out of order is named with the rank and the action", "[unit][pipeline]") {
  const PipelineShape sh{1, 2, 1};
  Program prog{{Action{Op::Backward, 0, 0}, Action{Op::Forward, 0, 0}}};
  CHECK_THROWS_WITH(run_pipeline(Schedule::OneFOneB, sh, Mlp(3), prog),
                    Contains("pipeline rank 0, action 0 (B s0 m0): its forward has not run"));
}
