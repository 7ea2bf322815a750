// The pipeline executor across processes: Gloo send/recv through dist::GroupPeerLink, every
// schedule on 3 ranks, each rank's stages' gradients and the loss equal to one process's gradient
// accumulation (fp64) over four steps through one link (messages new, received ahead on their
// recorded shapes, changed shapes, then those); a list out of step with its peer's is an error
// naming both messages.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "dist/dist_context.hpp"
#include "dist/pipeline_link.hpp"
#include "pipeline/pipeline_mlp.hpp"
#include "spawn.hpp"

using namespace trainer;
using namespace trainer::test::pipeline_mlp;
using Catch::Matchers::Contains;

TEST_CASE("worker: pipeline over Gloo", "[.worker]") {
  if (!test::is_worker()) return;
  torch::set_num_threads(1);
  config::DistConfig cfg;
  cfg.timeout_s = 60;
  auto ctx = dist::DistContext::create(dist::detect_launch_env(), cfg, torch::Device(torch::kCPU), "pipeline-link");
  const int64_t P = ctx->world_size(), rank = ctx->rank();
  const bool broken = std::getenv("TRAINER_PP_BROKEN") != nullptr;
  if (std::getenv("TRAINER_PP_DEAD") && rank == 0) std::_Exit(0);  // a lost first stage: its peers' receives fail
  const Mlp init(21);
  std::ofstream report(std::filesystem::path(std::getenv("TRAINER_TEST_DIR")) / ("rank" + std::to_string(rank) + ".txt"));
  using pipeline::Schedule;
  for (Schedule kind : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved1F1B, Schedule::ZeroBubble}) {
    const pipeline::PipelineShape sh{P, 5, kind == Schedule::Interleaved1F1B ? 2 : 1};
    auto prog = pipeline::make_schedule(kind, sh);
    if (broken) {  // rank 1 receives its first two activations in the wrong order
      auto& l = prog[1];
      auto a = std::find(l.begin(), l.end(), pipeline::Action{pipeline::Op::RecvActivation, 1, 0, 0});
      auto b = std::find(l.begin(), l.end(), pipeline::Action{pipeline::Op::RecvActivation, 1, 1, 0});
      std::iter_swap(a, b);
    }
    Mlp net(init), ref(init);
    dist::GroupPeerLink link(ctx->world_group());
    pipeline::Executor ex(sh, rank, stages_of(net, sh, rank), link);
    // four steps through one link: the first sends every message new, the second on the shapes both
    // ends recorded (received ahead), the third with fewer rows (changed shapes), the fourth on those
    const int64_t steps = broken ? 1 : 4;
    int64_t checked = 0;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t rows = step < 2 ? kMicro : kMicro - 1;
      for (auto* m : {&net, &ref})
        for (auto* list : {&m->w, &m->b})
          for (auto& t : *list)
            if (t.grad().defined()) t.mutable_grad().zero_();
      pipeline::StepResult got;
      try {
        got = ex.run(prog[static_cast<size_t>(rank)], [rows](int64_t m) { return batch(m, rows); });
      } catch (const dist::DistError& e) {  // the communicator's error keeps its kind through the executor
        report << "DistError: " << e.what() << "\n";
        report.flush();
        std::_Exit(3);
      } catch (const std::exception& e) {
        report << "error: " << e.what() << "\n";
        report.flush();
        std::_Exit(3);  // the peers are stuck on this rank: end at once, as the trainer's error exit does
      }
      const double want = reference(ref, sh.microbatches, rows);
      if (rank == (sh.stages() - 1) % P) REQUIRE(got.loss_value() == Approx(want).epsilon(1e-13));
      for (const auto& st : stages_of(net, sh, rank))
        for (const auto& p : st.params) {
          bool same = false;
          for (size_t i = 0; i < net.w.size(); ++i) {
            if (p.is_same(net.w[i])) same = torch::allclose(p.grad(), ref.w[i].grad(), 1e-12, 1e-14);
            if (p.is_same(net.b[i])) same = torch::allclose(p.grad(), ref.b[i].grad(), 1e-12, 1e-14);
          }
          INFO("step " << step << ", " << rows << " rows a microbatch");
          REQUIRE(same);
          ++checked;
        }
    }
    report << pipeline::schedule_name(kind) << " " << checked << " gradients equal over " << steps << " steps\n";
  }
}

TEST_CASE("pipeline over Gloo: every schedule on 3 ranks equals one process's gradient accumulation", "[dist][pipeline]") {
  if (test::is_worker()) return;
  auto procs = test::run_ranks("worker: pipeline over Gloo", 3, "pipeline_link", 300);
  for (size_t r = 0; r < procs.size(); ++r) {
    INFO("rank " << r << ":\n" << procs[r].output());
    REQUIRE(procs[r].exit_code == 0);
    const auto text = test::read_file(procs[r].log.parent_path() / ("rank" + std::to_string(r) + ".txt"));
    for (const char* s : {"gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"})
      CHECK_THAT(text, Contains(std::string(s) + " ") && Contains("over 4 steps"));
    CHECK_THAT(text, !Contains(" 0 gradients"));
  }
}

TEST_CASE("pipeline over Gloo: a receive out of step with the peer's sends names both messages", "[dist][pipeline]") {
  if (test::is_worker()) return;
  auto procs = test::run_ranks("worker: pipeline over Gloo", 3, "pipeline_link_broken", 300, {{"TRAINER_PP_BROKEN", "1"}});
  REQUIRE(procs[1].exit_code == 3);
  const auto text = test::read_file(procs[1].log.parent_path() / "rank1.txt");
  CHECK_THAT(text, Contains("pipeline rank 1, action") &&
                       Contains("(recv_act s1 m1 from rank 0): pipeline: at recv_act s1 m1 from rank 0 the next message "
                                "from rank 0 is the activation for stage 1 microbatch 0, not the activation for stage 1 "
                                "microbatch 1"));
  CHECK_THAT(text, Contains("error: pipeline rank 1"));  // a mismatch is no communicator failure
}

TEST_CASE("pipeline over Gloo: a lost peer's failed receive reaches the run as the communicator's DistError, naming "
          "the action",
          "[dist][pipeline]") {
  if (test::is_worker()) return;
  auto procs = test::run_ranks("worker: pipeline over Gloo", 3, "pipeline_link_dead", 300, {{"TRAINER_PP_DEAD", "1"}});
  REQUIRE(procs[0].exit_code == 0);
  INFO("rank 1:\n" << procs[1].output());
  REQUIRE(procs[1].exit_code == 3);
  const auto text = test::read_file(procs[1].log.parent_path() / "rank1.txt");
  CHECK_THAT(text, Contains("DistError: pipeline rank 1, action 0 (recv_act s1 m0 from rank 0): "));
}
