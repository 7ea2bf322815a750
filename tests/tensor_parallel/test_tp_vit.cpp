// ViT built over a tensor-parallel group (models/vit.cpp's parallelize) against the same ViT in one
// process: fp64, dropout 0. Each rank builds the full model from the seed and keeps its slices
// (in_proj by head groups per q/k/v block, out_proj by input columns, mlp.0 by rows, mlp.3 by
// columns); the logits (replicated: the head is not split), the cross-entropy loss and every
// parameter's gradient after the first backward (assembled from the ranks' shards) equal the
// one-process model's within 1e-10 relative, and the parameters are bitwise slices.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "dist/device_mesh.hpp"
#include "dist/dist_context.hpp"
#include "dist/spawn.hpp"
#include "dist/tp_communicator.hpp"
#include "models/vit.hpp"
#include "tp_results.hpp"

using namespace trainer;
using namespace trainer::test::tp;

namespace tp_vit {  // named: the unity build joins this file with the other tp tests

constexpr double kVitTol = 1e-10;

struct VitVariant {
  std::string name;
  config::Attention attention;
};
// sdpa and the explicit softmax: both attention paths of VitAttention
const std::vector<VitVariant> kVitVariants = {{"sdpa", config::Attention::Sdpa}, {"math", config::Attention::Math}};

config::ModelConfig vit_config(const VitVariant& v) {
  config::ModelConfig c;
  c.arch = "vit";
  c.in_channels = 3;
  c.num_classes = 5;
  c.image_size = 8;
  c.patch_size = 4;  // 4 patches + the class token: a sequence of 5, not divisible by T
  c.num_layers = 2;
  c.num_heads = 4;
  c.hidden_dim = 16;
  c.mlp_dim = 24;
  c.dropout = 0.0;
  c.attention_dropout = 0.0;
  c.attention = v.attention;
  return c;
}

std::pair<torch::Tensor, torch::Tensor> vit_batch() {
  auto gen = at::detail::createCPUGenerator(7);
  auto x = torch::randn({3, 3, 8, 8}, gen, torch::kFloat64);
  auto target = torch::randint(5, {3}, gen, torch::kInt64);
  return {x, target};
}

std::shared_ptr<models::VisionTransformer> vit_build(const VitVariant& v, const models::BuildContext& ctx) {
  torch::manual_seed(1234);
  auto m = std::make_shared<models::VisionTransformer>(vit_config(v), ctx);
  m->to(torch::kFloat64);
  // torchvision's head starts at zero, which would zero every other gradient: a random (replicated) head
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(99);
  m->head->weight.copy_(torch::randn(m->head->weight.sizes(), gen, torch::kFloat64) * 0.5);
  m->head->bias.copy_(torch::randn(m->head->bias.sizes(), gen, torch::kFloat64) * 0.1);
  return m;
}

void vit_run_variant(const VitVariant& v, tpl::Communicator& comm, Results& out) {
  auto m = vit_build(v, models::BuildContext{&comm, false});
  REQUIRE(m->vocab_shard() == nullptr);  // whole logits: the plain cross entropy
  auto [x, target] = vit_batch();
  auto logits = m->forward(x);  // (B, classes), the same on every rank
  auto loss = F::cross_entropy(logits, target);
  loss.backward();
  std::map<std::string, tpl::ShardSpec> specs;
  for (const auto& [name, spec] : m->shard_specs()) specs[name] = spec;
  const std::string p = v.name + "/";
  out[p + "logits"] = {m->full_logits(logits).detach(), whole(logits)};
  out[p + "loss"] = {loss.detach(), whole(loss)};
  for (const auto& item : m->named_parameters()) {
    auto it = specs.find(item.key());
    auto spec = it == specs.end() ? whole(item.value()) : it->second;
    REQUIRE_FALSE(spec.partial_grad);
    out[p + "grad/" + item.key()] = {item.value().grad().clone(), spec};
    out[p + "param/" + item.key()] = {item.value().detach().clone(), spec};
  }
}

Results vit_reference_of(const VitVariant& v) {
  Results out;
  auto m = vit_build(v, {});
  auto [x, target] = vit_batch();
  auto logits = m->forward(x);
  auto loss = F::cross_entropy(logits, target);
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

// Two ranks' layout for building only: any collective is a test failure.
class VitBuildOnly final : public tpl::Communicator {
 public:
  int64_t rank() const override { return 1; }
  int64_t size() const override { return 2; }
  void all_reduce(torch::Tensor&, tpl::ReduceOp) override { throw std::logic_error("no collective expected"); }
  torch::Tensor all_gather(const torch::Tensor&, int64_t) override { throw std::logic_error("no collective expected"); }
  torch::Tensor reduce_scatter(const torch::Tensor&, int64_t) override { throw std::logic_error("no collective expected"); }
};

struct VitCompared {
  int tensors = 0, sharded = 0;
  double worst = 0;  // the largest relative error of a non-parameter tensor
};

VitCompared vit_compare(std::vector<RankFile>& files) {
  VitCompared c;
  for (const auto& v : kVitVariants) {
    for (const auto& [name, want] : vit_reference_of(v)) {
      INFO("tensor " << name);
      std::vector<const Result*> shards;
      for (auto& f : files) {
        REQUIRE(f.results.count(name) == 1);
        shards.push_back(&f.results.at(name));
      }
      torch::Tensor got;
      if (shards[0]->spec.replicated()) {
        for (const auto* s : shards) REQUIRE(torch::equal(s->value, shards[0]->value));  // the same on every rank
        got = shards[0]->value;
      } else {
        auto a = assemble(shards);
        CHECK(torch::equal(a.covered, torch::ones_like(a.covered)));  // a partition of the global tensor
        got = a.value;
        ++c.sharded;
      }
      REQUIRE(got.sizes() == want.value.sizes());
      if (name.find("/param/") != std::string::npos) {
        CHECK(torch::equal(got, want.value));  // exact slices of the T = 1 weights
      } else {
        const double e = rel_err(got, want.value);
        CHECK(e < kVitTol);
        c.worst = std::max(c.worst, e);
      }
      ++c.tensors;
    }
  }
  return c;
}

std::vector<RankFile> vit_run_world(int tp, const std::string& dir_name) {
  auto procs = test::run_ranks("tp vit worker", tp, dir_name, 600, {{"TRAINER_TP", std::to_string(tp)}});
  std::vector<RankFile> files;
  for (int r = 0; r < tp; ++r) {
    INFO("rank " << r << " output:\n" << procs[r].output());
    REQUIRE(procs[r].exit_code == 0);
    files.push_back(load_results(procs[r].log.parent_path() / ("rank" + std::to_string(r) + ".pt")));
  }
  return files;
}

}  // namespace tp_vit

using namespace tp_vit;

TEST_CASE("tp vit worker", "[.worker]") {
  if (!test::is_worker()) return;
  torch::set_num_threads(1);
  config::DistConfig cfg;
  cfg.timeout_s = 300;
  auto ctx = dist::DistContext::create(dist::detect_launch_env(), cfg, torch::Device(torch::kCPU), "tp-vit-test");
  auto mesh = dist::DeviceMesh::create(*ctx, test::env_int("TRAINER_TP"));
  dist::GroupCommunicator comm(mesh->group(dist::MeshDim::TP));
  Results results;
  for (const auto& v : kVitVariants) vit_run_variant(v, comm, results);
  const std::filesystem::path dir = std::getenv("TRAINER_TEST_DIR");
  save_results(results, {{"tp_seconds", torch::tensor({comm.seconds()}, torch::kFloat64)}},
               dir / ("rank" + std::to_string(ctx->rank()) + ".pt"));
}

TEST_CASE("ViT at T=2 equals one process in fp64: logits, loss, every gradient", "[dist][tp]") {
  auto files = vit_run_world(2, "tp_vit2");
  const auto c = vit_compare(files);
  // 2 layers x (in_proj w, b; out_proj w; mlp.0 w, b; mlp.3 w) x (grad, param) x 2 variants
  CHECK(c.sharded == 2 * 6 * 2 * 2);
  CHECK(c.tensors > 60);
  WARN("ViT T=2: " << c.tensors << " tensors, worst relative error " << c.worst);
  for (auto& f : files) CHECK(f.extra("tp_seconds").item<double>() > 0.0);
}

TEST_CASE("ViT at T=4 equals one process in fp64: logits, loss, every gradient", "[dist][tp]") {
  auto files = vit_run_world(4, "tp_vit4");
  const auto c = vit_compare(files);
  CHECK(c.sharded == 2 * 6 * 2 * 2);
  WARN("ViT T=4: " << c.tensors << " tensors, worst relative error " << c.worst);
}

TEST_CASE("ViT at T=1 is the plain model, at T=2 its specs are the head groups and sequence parallel is refused at build", "[unit][tp]") {
  const auto& v = kVitVariants[0];
  auto m = vit_build(v, {});
  CHECK(m->shard_specs().empty());
  CHECK(m->vocab_shard() == nullptr);
  CHECK(&m->tp_comm() == &tpl::solo());
  CHECK(m->encoder->blocks[0]->tp_fc1.is_empty());
  VitBuildOnly two;
  CHECK_THROWS_WITH(vit_build(v, models::BuildContext{&two, true}), Catch::Contains("sequence_parallel"));
  auto p = vit_build(v, models::BuildContext{&two, false});
  std::map<std::string, tpl::ShardSpec> specs;
  for (const auto& [name, spec] : p->shard_specs()) specs[name] = spec;
  int64_t sliced = 0;
  for (const auto& [name, spec] : specs) sliced += spec.replicated() ? 0 : 1;
  CHECK(specs.size() == 2 * 8);  // per block: in_proj w, b; out_proj w, b; mlp.0 w, b; mlp.3 w, b
  CHECK(sliced == 2 * 6);        // the row layers' biases are replicated
  const auto& in = specs.at("encoder.layers.encoder_layer_1.self_attention.in_proj_weight");
  CHECK(in.global_shape == std::vector<int64_t>{48, 16});
  CHECK(in.ranges == tpl::qkv_head_ranges(16, 4, 1, 2));  // rank 1's heads 2, 3 in each of q, k, v
  CHECK(p->named_parameters()["encoder.layers.encoder_layer_1.self_attention.in_proj_weight"].sizes() ==
        torch::IntArrayRef({24, 16}));
  CHECK(specs.at("encoder.layers.encoder_layer_0.mlp.3.weight").dim == 1);
  CHECK(specs.count("heads.head.weight") == 0);  // replicated
}
