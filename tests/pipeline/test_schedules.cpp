// Pipeline schedules as data: every schedule over a sweep of (P, M, v) is legal, the known bubble and
// activation figures of GPipe and 1F1B come out exactly, and hand-broken lists are refused with the
// rank and action named. No process runs: the validator executes the lists itself.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <tuple>

#include "pipeline/schedule.hpp"
#include "pipeline/timeline.hpp"
#include "pipeline/validate.hpp"
#include <fmt/format.h>

using namespace trainer::pipeline;
using Catch::Matchers::Contains;

namespace {

const Schedule kAll[] = {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved1F1B, Schedule::ZeroBubble};

std::string compute_row(const Program& p, size_t rank) {
  std::string s;
  for (const auto& a : p[rank])
    if (is_compute(a.op)) s += fmt::format("{}{}{}", s.empty() ? "" : " ", op_name(a.op), a.micro);
  return s;
}

// index of the first action of rank r equal to `want`
size_t find(const Program& p, size_t r, const Action& want) {
  auto it = std::find(p[r].begin(), p[r].end(), want);
  REQUIRE(it != p[r].end());
  return static_cast<size_t>(it - p[r].begin());
}

}  // namespace

TEST_CASE("every schedule is legal over a sweep of ranks, microbatches and virtual stages", "[unit][pipeline]") {
  int checked = 0;
  for (Schedule kind : kAll)
    for (int64_t P = 1; P <= 6; ++P)
      for (int64_t M = 1; M <= 13; ++M)
        for (int64_t v : {1, 2, 3}) {
          if (v > 1 && kind != Schedule::Interleaved1F1B) continue;
          const PipelineShape sh{P, M, v};
          INFO(schedule_name(kind) << " P=" << P << " M=" << M << " v=" << v);
          const auto prog = make_schedule(kind, sh);
          const auto r = validate(prog, sh);
          INFO(r.summary());
          REQUIRE(r.ok);
          const auto t = simulate(prog, sh);
          // every rank does S/P stages x M microbatches x 3 units of work
          CHECK(t.makespan >= 3 * M * v);
          CHECK(t.bubble >= 0.0);
          CHECK(t.bubble < 1.0);
          ++checked;
        }
  CHECK(checked == 6 * 13 * (3 + 3));
}

TEST_CASE("GPipe and 1F1B take the textbook bubble and activations", "[unit][pipeline]") {
  for (int64_t P : {2, 3, 4})
    for (int64_t M : {1, 2, 4, 5, 8, 16}) {
      const PipelineShape sh{P, M, 1};
      INFO("P=" << P << " M=" << M);
      const auto g = simulate(make_schedule(Schedule::GPipe, sh), sh);
      const auto f = simulate(make_schedule(Schedule::OneFOneB, sh), sh);
      const double textbook = static_cast<double>(P - 1) / static_cast<double>(M + P - 1);
      CHECK(g.bubble == Approx(textbook).epsilon(1e-12));
      CHECK(f.bubble == Approx(textbook).epsilon(1e-12));
      CHECK(g.makespan == 3 * (M + P - 1));
      for (int64_t r = 0; r < P; ++r) {
        CHECK(g.peak_activations[static_cast<size_t>(r)] == M);                   // GPipe holds every microbatch
        CHECK(f.peak_activations[static_cast<size_t>(r)] == std::min(M, P - r));  // 1F1B at most P - r
      }
    }
}

TEST_CASE("1F1B's rank order is warm-up, one forward one backward, cool-down", "[unit][pipeline]") {
  const PipelineShape sh{4, 6, 1};
  const auto p = make_schedule(Schedule::OneFOneB, sh);
  CHECK(compute_row(p, 0) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  CHECK(compute_row(p, 2) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  CHECK(compute_row(p, 3) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // messages: rank 1 receives stage 1's input from rank 0 right before its forward, and sends the
  // gradient back right after its backward
  const size_t f = find(p, 1, Action{Op::Forward, 1, 0});
  CHECK(p[1][f - 1] == Action{Op::RecvActivation, 1, 0, 0});
  CHECK(p[1][f + 1] == Action{Op::SendActivation, 2, 0, 2});
  const size_t b = find(p, 1, Action{Op::Backward, 1, 0});
  CHECK(p[1][b - 1] == Action{Op::RecvGrad, 1, 0, 2});
  CHECK(p[1][b + 1] == Action{Op::SendGrad, 0, 0, 0});
}

TEST_CASE("interleaving and zero bubble shrink 1F1B's bubble", "[unit][pipeline]") {
  for (int64_t P : {2, 4})
    for (int64_t M : {4, 8, 16}) {
      INFO("P=" << P << " M=" << M);
      const PipelineShape one{P, M, 1}, two{P, M, 2};
      const double f = simulate(make_schedule(Schedule::OneFOneB, one), one).bubble;
      const auto i = simulate(make_schedule(Schedule::Interleaved1F1B, two), two);
      const auto z = simulate(make_schedule(Schedule::ZeroBubble, one), one);
      CHECK(i.bubble < f);
      CHECK(z.bubble < f);
      for (int64_t r = 0; r < P; ++r) CHECK(z.peak_activations[static_cast<size_t>(r)] <= P);  // 1F1B's peak (rank 0)
    }
}

TEST_CASE("zero bubble splits every backward into an input half and a later weight half", "[unit][pipeline]") {
  const PipelineShape sh{3, 5, 1};
  const auto p = make_schedule(Schedule::ZeroBubble, sh);
  for (size_t r = 0; r < 3; ++r)
    for (int64_t m = 0; m < 5; ++m) {
      const auto s = static_cast<int64_t>(r);
      CHECK(find(p, r, Action{Op::BackwardInput, s, m}) < find(p, r, Action{Op::BackwardWeight, s, m}));
      CHECK(std::count(p[r].begin(), p[r].end(), Action{Op::Backward, s, m}) == 0);
    }
}

TEST_CASE("the validator refuses broken action lists, naming the rank and the action", "[unit][pipeline]") {
  const PipelineShape sh{2, 3, 1};
  const auto good = make_schedule(Schedule::OneFOneB, sh);
  REQUIRE(validate(good, sh).ok);

  SECTION("a missing receive: the forward waits forever and the message is never taken") {
    auto p = good;
    p[1].erase(p[1].begin() + static_cast<long>(find(p, 1, Action{Op::RecvActivation, 1, 1, 0})));
    const auto r = validate(p, sh);
    REQUIRE_FALSE(r.ok);
    CHECK_THAT(r.summary(), Contains("deadlock: rank 1, action") && Contains("(F s1 m1) waits for the activation of s0 m1"));
  }
  SECTION("two receives swapped: the pair is out of order") {
    auto p = good;
    const size_t a = find(p, 1, Action{Op::RecvActivation, 1, 0, 0}), b = find(p, 1, Action{Op::RecvActivation, 1, 1, 0});
    std::swap(p[1][a], p[1][b]);
    const auto r = validate(p, sh);
    REQUIRE_FALSE(r.ok);
    CHECK_THAT(r.summary(), Contains("rank 1, action " + std::to_string(a) + " (recv_act s1 m1 from rank 0): the next "
                                     "message from rank 0 is send_act s1 m0 to rank 1 (a send/receive pair out of order)"));
  }
  SECTION("a backward before the gradient it needs comes: a wait that never ends") {
    auto p = good;
    const size_t recv = find(p, 0, Action{Op::RecvGrad, 0, 0, 1});
    const size_t b = find(p, 0, Action{Op::Backward, 0, 0});
    std::swap(p[0][recv], p[0][b]);
    const auto r = validate(p, sh);
    REQUIRE_FALSE(r.ok);
    CHECK_THAT(r.summary(), Contains("deadlock: rank 0, action " + std::to_string(recv) + " (B s0 m0)"));
  }
  SECTION("a forward done twice and a backward left out") {
    auto p = good;
    const size_t b = find(p, 0, Action{Op::Backward, 0, 2});
    p[0][b] = Action{Op::Forward, 0, 2};
    const auto r = validate(p, sh);
    REQUIRE_FALSE(r.ok);
    CHECK_THAT(r.summary(), Contains("stage 0 microbatch 2: 2 forwards (want 1)"));
    CHECK_THAT(r.summary(), Contains("stage 0 microbatch 2: 0 backward, 0 input half and 0 weight half"));
  }
  SECTION("a message to the wrong rank, a compute on the wrong rank") {
    auto p = good;
    p[0][find(p, 0, Action{Op::SendActivation, 1, 0, 1})].peer = 0;
    p[1].push_back(Action{Op::Forward, 0, 0});
    const auto r = validate(p, sh);
    REQUIRE_FALSE(r.ok);
    CHECK_THAT(r.summary(), Contains("rank 0, action 1 (send_act s1 m0 to rank 0): its peer should be rank 1"));
    CHECK_THAT(r.summary(), Contains("rank 1, action " + std::to_string(p[1].size() - 1) + " (F s0 m0): stage 0 runs on rank 0"));
  }
  SECTION("a list per rank") {
    CHECK_THAT(validate(Program(3), sh).summary(), Contains("3 action lists for 2 ranks"));
  }
}

TEST_CASE("schedule shapes that cannot be taken are refused", "[unit][pipeline]") {
  CHECK_THROWS_WITH(make_schedule(Schedule::OneFOneB, PipelineShape{2, 4, 2}),
                    Contains("virtual stages > 1 need the interleaved_1f1b schedule, not 1f1b"));
  CHECK_THROWS_WITH(make_schedule(Schedule::GPipe, PipelineShape{2, 0, 1}), Contains("at least 1"));
}

TEST_CASE("the timeline draws each rank's actions and the bubble", "[unit][pipeline]") {
  const PipelineShape sh{2, 2, 1};
  const auto t = simulate(make_schedule(Schedule::GPipe, sh), sh);
  // rank 0: F0 F1, waits for the gradient, B0 B0 B1 B1; rank 1 starts one unit later
  CHECK(render(t, sh) ==
        "  rank  0 |F0F1......B0B0B1B1| peak activations 2\n"
        "  rank  1 |..F0F1B0B0B1B1....| peak activations 2\n"
        "  9 units of one forward; bubble 33.3 % of rank-time");
  const PipelineShape il{2, 2, 2};
  CHECK_THAT(render(simulate(make_schedule(Schedule::Interleaved1F1B, il), il), il), Contains("f0"));  // stage 2, 3
}

// By hand: ./build/tests/test_pipeline "[.print]" draws the schedules side by side.
TEST_CASE("the timelines of interleaved, 1F1B and zero bubble, printed", "[.print]") {
  for (auto [P, M, v] : {std::tuple{2, 4, 2}, std::tuple{2, 8, 2}, std::tuple{4, 8, 2}}) {
    const PipelineShape il{P, M, v};
    std::cout << "interleaved P=" << P << " M=" << M << "\n" << render(simulate(make_schedule(Schedule::Interleaved1F1B, il), il), il, 200) << "\n";
    const PipelineShape one{P, M, 1};
    std::cout << "1f1b\n" << render(simulate(make_schedule(Schedule::OneFOneB, one), one), one, 200) << "\n";
    std::cout << "zb\n" << render(simulate(make_schedule(Schedule::ZeroBubble, one), one), one, 200) << "\n";
  }
}
