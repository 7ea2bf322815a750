// The model families cut into pipeline stages by a run's plan (pipeline/plan.hpp): chaining
// Model::forward_units over the stages is forward bit for bit, and the executor over those stages
// (ranks as threads, every schedule, P 2 and 4, uneven stages, M < P) gives one process's loss and
// gradients of the same batch. GPT's tied wte / lm_head: its gradient is the sum of the first
// stage's (embedding) and the last stage's (logits) parts.
#include <catch2/catch.hpp>

#include <exception>
#include <set>
#include <thread>

#include "models/model.hpp"
#include "pipeline/plan.hpp"
#include "pipeline/unit_range_print.hpp"
#include "pipeline/queue_link.hpp"
#include "test_util.hpp"
#include "tiny_models.hpp"

using namespace trainer;
using namespace trainer::pipeline;
using Catch::Matchers::Contains;

namespace model_stages {  // named: the unity build joins the pipeline tests

constexpr int64_t kSeed = 5;

config::RunConfig gpt_config(int64_t n_layer) { return test::tiny_stage_gpt(n_layer); }
config::RunConfig vit_config() { return test::tiny_stage_vit(); }

models::ModelPtr build(const config::RunConfig& c) {
  torch::manual_seed(kSeed);
  return models::builtin_models().create(c.model);
}

// A fixed batch: token ids or images, and its targets.
std::pair<torch::Tensor, torch::Tensor> batch_of(const config::RunConfig& c) {
  torch::manual_seed(17);
  const int64_t B = c.train.batch_size;
  if (c.model.arch == "gpt")
    return {torch::randint(c.model.vocab_size, {B, c.model.block_size}), torch::randint(c.model.vocab_size, {B, c.model.block_size})};
  return {torch::randn({B, c.model.in_channels, c.model.image_size, c.model.image_size}),
          torch::randint(c.model.num_classes, {B})};
}

torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
}

// The parameters stage `r` of `plan` trains on `model`: those its units own, and those they read (tied).
std::vector<std::pair<std::string, torch::Tensor>> stage_params(models::Model& model, const UnitRange& r) {
  const auto units = model.units();
  std::set<std::string> reads;
  for (int64_t u = r.first; u <= r.last; ++u)
    for (const auto& n : units[static_cast<size_t>(u)].reads) reads.insert(n);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : model.named_parameters()) {
    const int64_t u = models::unit_of(units, p.key());
    if ((u >= r.first && u <= r.last) || reads.count(p.key())) out.emplace_back(p.key(), p.value());
  }
  return out;
}

struct Ranks {
  std::vector<models::ModelPtr> models;  // one per pipeline rank, each built as one process builds it
  double loss_sum = 0;
  int64_t losses = 0;
};

Ranks run_pipeline(const config::RunConfig& c, const Plan& plan) {
  const auto [x, y] = batch_of(c);
  const auto& sh = plan.shape;
  const int64_t micro = c.train.batch_size / sh.microbatches;
  Ranks out;
  for (int64_t r = 0; r < sh.ranks; ++r) out.models.push_back(build(c));
  test::Mailboxes box;
  std::vector<StepResult> results(static_cast<size_t>(sh.ranks));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(sh.ranks));
  const auto program = make_schedule(plan.schedule, sh);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < sh.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        auto& model = *out.models[static_cast<size_t>(r)];
        std::vector<StageFn> stages;
        for (int64_t s = r; s < sh.stages(); s += sh.ranks) {
          const auto range = plan.stages[static_cast<size_t>(s)];
          const bool last = s == sh.stages() - 1;
          StageFn f;
          f.stage = s;
          f.forward = [&model, range, last, &y = y, micro](const torch::Tensor& in, int64_t m) {
            auto h = model.forward_units(in, range.first, range.last);
            return last ? loss_of(h, y.narrow(0, m * micro, micro)) : h;
          };
          for (auto& [name, p] : stage_params(model, range)) f.params.push_back(p);
          stages.push_back(f);
        }
        test::QueueLink link(box, r, 60);
        Executor ex(sh, r, stages, link);
        results[static_cast<size_t>(r)] =
            ex.run(program[static_cast<size_t>(r)], [&x = x, micro](int64_t m) { return x.narrow(0, m * micro, micro); });
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
  return out;
}

// Every gradient of the pipeline (each parameter from the rank whose stage owns it; a tied one summed
// over the stages that read it) against one process's on the whole batch.
void check_against_one_process(const config::RunConfig& c, const Plan& plan) {
  auto ref = build(c);
  const auto [x, y] = batch_of(c);
  auto loss = loss_of(ref->forward(x), y);
  loss.backward();
  const auto got = run_pipeline(c, plan);
  const auto& sh = plan.shape;
  REQUIRE(got.losses == sh.microbatches);
  CHECK(got.loss_sum / static_cast<double>(sh.microbatches) == Approx(loss.item<double>()).epsilon(1e-6));
  std::map<std::string, torch::Tensor> sum;  // name -> the gradient summed over the ranks that train it
  for (int64_t s = 0; s < sh.stages(); ++s)
    for (auto& [name, p] : stage_params(*got.models[static_cast<size_t>(sh.rank_of(s))], plan.stages[static_cast<size_t>(s)])) {
      INFO(name << " on stage " << s);
      REQUIRE(p.grad().defined());
      // a rank holding two stages that both read a parameter lists it twice: its gradient counts once
      auto key = name + "@" + std::to_string(sh.rank_of(s));
      if (sum.count(key)) continue;
      sum[key] = p.grad();
    }
  std::map<std::string, torch::Tensor> by_name;
  for (auto& [key, g] : sum) {
    const auto name = key.substr(0, key.find('@'));
    by_name[name] = by_name.count(name) ? by_name[name] + g : g;
  }
  for (const auto& p : ref->named_parameters()) {
    INFO(p.key());
    REQUIRE(by_name.count(p.key()));
    const auto diff = (by_name[p.key()] - p.value().grad()).abs().max().item<double>();
    CHECK(diff <= 1e-6);
  }
}

}  // namespace model_stages

using namespace model_stages;

TEST_CASE("GPT and ViT: forward_units over the stages of a plan is forward, bit for bit", "[unit][pipeline]") {
  for (const auto& c : {gpt_config(3), vit_config()}) {
    auto model = build(c);
    const auto [x, y] = batch_of(c);
    const auto whole = model->forward(x);
    for (int64_t P : {2, 3, 4, 5}) {
      auto cfg = c;
      cfg.dist.pipeline_parallel = P;
      const auto plan = make_plan(cfg);
      torch::Tensor h = x;
      for (const auto& r : plan.stages) h = model->forward_units(h, r.first, r.last);
      INFO(c.model.arch << " P=" << P);
      CHECK(torch::equal(h, whole));
    }
    CHECK_THROWS_WITH(model->forward_units(x, 2, 9), Contains("units 2..9 are not a range of its 5 units"));
  }
}

TEST_CASE("GPT stages under every schedule give one process's loss and gradients, the tied wte summed", "[unit][pipeline]") {
  using config::PipeSchedule;
  for (auto sched : {PipeSchedule::GPipe, PipeSchedule::OneFOneB, PipeSchedule::Interleaved1F1B, PipeSchedule::ZeroBubble})
    for (int64_t P : {2, 4})
      for (int64_t M : {1, 2, 8}) {
        auto c = gpt_config(P == 2 ? 3 : 6);  // 5 units on 2 stages; 8 units on 4 (or 8 interleaved)
        c.dist.pipeline_parallel = P;
        c.dist.pipeline.microbatches = M;
        c.dist.pipeline.schedule = sched;
        c.dist.pipeline.virtual_stages = sched == PipeSchedule::Interleaved1F1B ? 2 : 1;
        const auto plan = make_plan(c);
        INFO(config::name_of(sched) << " P=" << P << " M=" << M);
        check_against_one_process(c, plan);
      }
}

TEST_CASE("ViT stages and an explicit uneven stage list give one process's gradients", "[unit][pipeline]") {
  auto c = vit_config();
  c.dist.pipeline_parallel = 2;
  c.dist.pipeline.microbatches = 4;
  check_against_one_process(c, make_plan(c));
  auto g = gpt_config(3);
  g.dist.pipeline_parallel = 2;
  g.dist.pipeline.microbatches = 2;
  g.dist.pipeline.stages = {"0", "1-4"};  // the embeddings alone, then every block and the head
  const auto plan = make_plan(g);
  CHECK(plan.stages == std::vector<UnitRange>{{0, 0}, {1, 4}});
  CHECK_FALSE(plan.balanced);
  check_against_one_process(g, plan);
}
