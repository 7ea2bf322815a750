// GPT built over a tensor-parallel group (models/gpt_parallel.cpp) against the same GPT in one
// process: fp64, dropout 0. Each rank builds the full model from the seed and keeps its slices; the
// logits (gathered), the loss (vocab-parallel cross entropy, never gathering the logits) and every
// parameter's gradient after the first backward (assembled from the ranks' shards, sequence
// parallel's partial gradients summed) equal the one-process model's within 1e-10 relative. The
// variants: plain, sequence parallel with a padded GPT-2 vocabulary and label smoothing 0.1, and
// no biases with the padded vocabulary.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "dist/device_mesh.hpp"
#include "dist/dist_context.hpp"
#include "dist/spawn.hpp"
#include "dist/tp_communicator.hpp"
#include "models/gpt.hpp"
#include "tp_results.hpp"

using namespace trainer;
using namespace trainer::test::tp;

namespace tp_gpt {  // named: the unity build joins this file with the other tp tests

constexpr double kTol = 1e-10;

struct Variant {
  std::string name;
  int64_t vocab;
  bool sp, bias;
  double label_smoothing;
};
const std::vector<Variant> kVariants = {{"plain", 64, false, true, 0.0},
                                        {"sp_gpt2_vocab_ls", 50257, true, true, 0.1},
                                        {"nobias_gpt2_vocab", 50257, false, false, 0.0}};

config::ModelConfig gpt_config(const Variant& v) {
  config::ModelConfig c;
  c.arch = "gpt";
  c.vocab_size = v.vocab;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 16;
  c.dropout = 0.0;
  c.bias = v.bias;
  return c;
}

std::pair<torch::Tensor, torch::Tensor> batch(const Variant& v) {
  auto gen = at::detail::createCPUGenerator(7);
  auto idx = torch::randint(v.vocab, {2, 8}, gen, torch::kInt64);
  auto target = torch::randint(v.vocab, {2, 8}, gen, torch::kInt64);
  target[1][2] = -100;       // ignored
  target[0][5] = v.vocab - 1;  // the last real token, next to the padding
  return {idx, target};
}

std::shared_ptr<models::Gpt> build(const Variant& v, const models::BuildContext& ctx) {
  torch::manual_seed(1234);
  auto m = std::make_shared<models::Gpt>(gpt_config(v), ctx);
  m->to(torch::kFloat64);
  return m;
}

// One variant on this rank: logits, loss, every parameter's gradient (and value) with its spec.
void run_variant(const Variant& v, tpl::Communicator& comm, Results& out) {
  auto m = build(v, models::BuildContext{&comm, v.sp});
  auto [idx, target] = batch(v);
  auto logits = m->forward(idx);  // (B, T, V_padded / T)
  REQUIRE(m->vocab_shard() != nullptr);
  auto loss = tpl::mean_over_targets(
      tpl::vocab_parallel_cross_entropy(logits, target, *m->vocab_shard(), comm, v.label_smoothing), target);
  loss.backward();
  std::map<std::string, tpl::ShardSpec> specs;
  for (const auto& [name, spec] : m->shard_specs()) specs[name] = spec;
  const std::string p = v.name + "/";
  out[p + "logits"] = {m->full_logits(logits), whole(logits)};
  out[p + "loss"] = {loss.detach(), whole(loss)};
  for (const auto& item : m->named_parameters()) {
    auto it = specs.find(item.key());
    auto spec = it == specs.end() ? whole(item.value()) : it->second;
    auto g = item.value().grad().clone();
    if (spec.partial_grad) comm.all_reduce(g, tpl::ReduceOp::Sum);
    spec.partial_grad = false;
    out[p + "grad/" + item.key()] = {g, spec};
    out[p + "param/" + item.key()] = {item.value().detach().clone(), spec};
  }
}

Results reference_of(const Variant& v) {
  Results out;
  auto m = build(v, {});
  auto [idx, target] = batch(v);
  auto logits = m->forward(idx);  // (B, T, V)
  auto loss = F::cross_entropy(logits.reshape({-1, v.vocab}), target.reshape({-1}),
                               F::CrossEntropyFuncOptions().label_smoothing(v.label_smoothing));
  loss.backward();
  const std::string p = v.name + "/";
  out[p + "logits"] = {logits.detach(), whole(logits)};
  out[p + "loss"] = {loss.detach(), whole(loss)};
  for (const auto& item : m->named_parameters()) {
    out[p + "grad/" + item.key()] = {item.value().grad().clone(), whole(item.value())};
    out[p + "param/" + item.key()] = {item.value().detach().clone(), whole(item.value())};
  }
  return out;
}

// Returns how many tensors were compared; params must match bitwise (exact slices of the T = 1 weights).
int compare(std::vector<RankFile>& files) {
  int compared = 0;
  for (const auto& v : kVariants) {
    for (const auto& [name, want] : reference_of(v)) {
      INFO("tensor " << name);
      std::vector<const Result*> shards;
      for (auto& f : files) {
        REQUIRE(f.results.count(name) == 1);
        shards.push_back(&f.results.at(name));
      }
      const bool exact = name.find("/param/") != std::string::npos;
      torch::Tensor got;
      if (shards[0]->spec.replicated()) {
        for (const auto* s : shards) REQUIRE(torch::equal(s->value, shards[0]->value));  // the same on every rank
        got = shards[0]->value;
      } else {
        auto a = assemble(shards);
        CHECK(torch::equal(a.covered, torch::ones_like(a.covered)));  // a partition of the global tensor
        const int64_t dim = shards[0]->spec.dim, real = want.value.size(dim);
        if (a.value.size(dim) > real)  // the padding rows: zero weights, zero gradients
          CHECK(a.value.narrow(dim, real, a.value.size(dim) - real).abs().max().item<double>() == 0.0);
        got = a.value.narrow(dim, 0, real);
      }
      REQUIRE(got.sizes() == want.value.sizes());
      if (exact) CHECK(torch::equal(got, want.value));
      else CHECK(rel_err(got, want.value) < kTol);
      ++compared;
    }
  }
  return compared;
}

std::vector<RankFile> run_world(int tp, const std::string& dir_name) {
  auto procs = test::run_ranks("tp gpt worker", tp, dir_name, 600, {{"TRAINER_TP", std::to_string(tp)}});
  std::vector<RankFile> files;
  for (int r = 0; r < tp; ++r) {
    INFO("rank " << r << " output:\n" << procs[r].output());
    REQUIRE(procs[r].exit_code == 0);
    files.push_back(load_results(procs[r].log.parent_path() / ("rank" + std::to_string(r) + ".pt")));
  }
  return files;
}

}  // namespace tp_gpt

using namespace tp_gpt;

TEST_CASE("tp gpt worker", "[.worker]") {
  if (!test::is_worker()) return;
  torch::set_num_threads(1);
  config::DistConfig cfg;
  cfg.timeout_s = 300;
  auto ctx = dist::DistContext::create(dist::detect_launch_env(), cfg, torch::Device(torch::kCPU), "tp-gpt-test");
  auto mesh = dist::DeviceMesh::create(*ctx, test::env_int("TRAINER_TP"));
  dist::GroupCommunicator comm(mesh->group(dist::MeshDim::TP));
  Results results;
  for (const auto& v : kVariants) run_variant(v, comm, results);
  const std::filesystem::path dir = std::getenv("TRAINER_TEST_DIR");
  save_results(results, {{"tp_seconds", torch::tensor({comm.seconds()}, torch::kFloat64)}},
               dir / ("rank" + std::to_string(ctx->rank()) + ".pt"));
}

TEST_CASE("GPT at T=2 (sequence parallel, GPT-2 vocabulary padded, label smoothing) equals one process in fp64",
          "[dist][tp]") {
  auto files = run_world(2, "tp_gpt2");
  CHECK(compare(files) > 100);
  for (auto& f : files) CHECK(f.extra("tp_seconds").item<double>() > 0.0);
}

TEST_CASE("GPT at T=4 (sequence parallel, GPT-2 vocabulary padded, label smoothing) equals one process in fp64",
          "[dist][tp]") {  // ~8 s
  auto files = run_world(4, "tp_gpt4");
  CHECK(compare(files) > 100);
}

TEST_CASE("GPT at T=1 is the plain model: no specs, no vocabulary shard, logits returned as they are", "[unit][tp]") {
  const auto& v = kVariants[0];
  auto m = build(v, {});
  CHECK(m->shard_specs().empty());
  CHECK(m->vocab_shard() == nullptr);
  auto [idx, target] = batch(v);
  auto logits = m->forward(idx);
  CHECK(m->full_logits(logits).is_same(logits));
  CHECK(&m->tp_comm() == &tpl::solo());
}
