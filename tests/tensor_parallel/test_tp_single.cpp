// Tensor parallel in one process: the T = 1 path is plain torch, the shard rules, the mesh layout.
#include <catch2/catch.hpp>

#include "dist/device_mesh.hpp"
#include "dist/dist_context.hpp"
#include "tp_results.hpp"

using namespace trainer;
using namespace trainer::test::tp;
using Catch::Matchers::Contains;
using dist::MeshDim;

TEST_CASE("at T=1 every tensor-parallel op, layer and block equals plain torch", "[unit][tp]") {
  const auto got = run_all(tpl::solo());
  const auto ref = reference(1);
  REQUIRE(got.size() == ref.size());
  for (const auto& [name, want] : ref) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    const auto& r = got.at(name);
    // at T = 1 every shard is the whole tensor
    REQUIRE(r.value.sizes() == torch::IntArrayRef(r.spec.replicated() ? want.value.sizes() : r.spec.global_shape));
    CHECK(rel_err(r.value, want.value) < 1e-12);
  }
}

TEST_CASE("at T=1 the region operators are the identity with no autograd node", "[unit][tp]") {
  auto x = torch::randn({2, 4, 6}, torch::kFloat64).requires_grad_(true);
  auto& c = tpl::solo();
  for (const auto& y : {tpl::copy_to_region(x, c), tpl::reduce_from_region(x, c), tpl::scatter_to_region(x, c),
                        tpl::gather_from_region(x, c), tpl::scatter_to_sequence(x, c, 1),
                        tpl::gather_from_sequence(x, c, 1), tpl::reduce_scatter_to_sequence(x, c, 1)})
    CHECK(y.is_same(x));
}

TEST_CASE("shard rules: head-group rows of a fused qkv, the vocabulary padding, exact slices", "[unit][tp]") {
  using R = std::vector<tpl::Range>;
  CHECK(tpl::qkv_head_ranges(16, 4, 0, 2) == R{{0, 8}, {16, 24}, {32, 40}});
  CHECK(tpl::qkv_head_ranges(16, 4, 1, 2) == R{{8, 16}, {24, 32}, {40, 48}});
  CHECK(tpl::qkv_head_ranges(12, 6, 2, 3) == R{{8, 12}, {20, 24}, {32, 36}});
  CHECK_THROWS_WITH(tpl::qkv_head_ranges(16, 6, 0, 4), Contains("n_head 6 does not divide by 4 ranks"));

  CHECK(tpl::padded_vocab(50257, 1) == 50257);
  CHECK(tpl::padded_vocab(50257, 2) == 50258);
  CHECK(tpl::padded_vocab(50257, 4) == 50260);
  CHECK(tpl::padded_vocab(50304, 8) == 50304);
  const auto last = tpl::vocab_shard(50257, 3, 4);
  CHECK(last.start == 37695);
  CHECK(last.end == 50260);
  CHECK(last.real() == 12562);
  CHECK(tpl::vocab_shard(50257, 0, 4).real() == 12565);
  CHECK(tpl::vocab_shard(5, 3, 4).real() == 0);  // a rank of padding only

  auto w = torch::randn({48, 16}, torch::kFloat64);
  auto part = tpl::take_ranges(w, 0, tpl::qkv_head_ranges(16, 4, 1, 2));
  CHECK(torch::equal(part, torch::cat({w.slice(0, 8, 16), w.slice(0, 24, 32), w.slice(0, 40, 48)})));
  CHECK_FALSE(tpl::released_form(part));
}

// A pipeline rank's other stages are released (io::release_weight: one element, zero strides) before
// the tensor-parallel layers slice them: their slices stay released, so nothing is allocated.
TEST_CASE("the tensor-parallel layers slice a released weight into released slices", "[unit][tp]") {
  auto released = [](std::vector<int64_t> shape) { return torch::zeros({1}, torch::kFloat64).expand(shape); };
  const auto w = released({48, 16});
  REQUIRE(tpl::released_form(w));
  const auto part = tpl::take_ranges(w, 0, tpl::qkv_head_ranges(16, 4, 1, 2));
  CHECK(part.sizes() == torch::IntArrayRef({24, 16}));
  CHECK(tpl::released_form(part));
  CHECK(tpl::released_form(tpl::take_ranges(released({8, 12}), 1, {{0, 6}})));
  auto& c = tpl::solo();
  tpl::ColumnParallelLinear col(released({8, 4}), released({8}), std::vector<tpl::Range>{{0, 8}}, c, tpl::ParallelOptions{});
  CHECK(tpl::released_form(col->weight));
  CHECK(tpl::released_form(col->bias));
  tpl::RowParallelLinear row(released({8, 4}), released({8}), c, tpl::ParallelOptions{});
  CHECK(tpl::released_form(row->weight));
  CHECK(tpl::released_form(row->bias));
  tpl::VocabParallelEmbedding emb(released({10, 4}), c, tpl::ParallelOptions{});
  CHECK(tpl::released_form(emb->weight));
  CHECK(emb->weight.sizes() == torch::IntArrayRef({10, 4}));
  // a whole weight is copied, as before
  tpl::RowParallelLinear whole(torch::randn({8, 4}), torch::randn({8}), c, tpl::ParallelOptions{});
  CHECK_FALSE(tpl::released_form(whole->weight));
}

TEST_CASE("vocab-parallel cross entropy checks its inputs", "[unit][tp]") {
  const auto shard = tpl::vocab_shard(10, 0, 1);
  auto z = torch::randn({3, 9});
  CHECK_THROWS_WITH(tpl::vocab_parallel_cross_entropy(z, torch::zeros({3}, torch::kInt64), shard, tpl::solo()),
                    Contains("logits have 9 columns, this rank's vocabulary rows are 10"));
  auto ok = torch::randn({3, 10});
  CHECK_THROWS_WITH(tpl::vocab_parallel_cross_entropy(ok, torch::zeros({3}, torch::kInt64), shard, tpl::solo(), 1.5),
                    Contains("label_smoothing must be in [0, 1]"));
}

TEST_CASE("mesh layout: tp ranks consecutive, groups per dimension", "[unit][tp]") {
  const dist::MeshLayout l(8, 2);
  CHECK(l.size(MeshDim::DP) == 4);
  CHECK(l.size(MeshDim::TP) == 2);
  CHECK(l.coord(5) == dist::MeshCoord{2, 1});
  CHECK(l.rank_of({3, 0}) == 6);
  CHECK(l.group_ranks(MeshDim::TP, 5) == std::vector<int64_t>{4, 5});
  CHECK(l.group_ranks(MeshDim::DP, 5) == std::vector<int64_t>{1, 3, 5, 7});
  CHECK(dist::MeshLayout(4, 4).group_ranks(MeshDim::DP, 2) == std::vector<int64_t>{2});
  CHECK(dist::MeshLayout(4, 2).describe() ==
        "dp 2 x tp 2: rank 0 (dp 0, tp 0), rank 1 (dp 0, tp 1), rank 2 (dp 1, tp 0), rank 3 (dp 1, tp 1)");
  CHECK_THROWS_WITH(dist::MeshLayout(6, 4), Contains("tensor parallel size 4 does not divide the world of 6 ranks"));
}

TEST_CASE("mesh layout: pipeline parallel outermost, rank = (pp x D + dp) x T + tp", "[unit][tp]") {
  const dist::MeshLayout l(12, 2, 3);  // pp 3 x dp 2 x tp 2
  CHECK(l.size(MeshDim::PP) == 3);
  CHECK(l.size(MeshDim::DP) == 2);
  CHECK(l.coord(7) == dist::MeshCoord{.dp = 1, .tp = 1, .pp = 1});
  for (int64_t r = 0; r < 12; ++r) CHECK(l.rank_of(l.coord(r)) == r);
  CHECK(l.group_ranks(MeshDim::PP, 7) == std::vector<int64_t>{3, 7, 11});  // one stage per pp rank
  CHECK(l.group_ranks(MeshDim::DP, 7) == std::vector<int64_t>{5, 7});
  CHECK(l.group_ranks(MeshDim::TP, 7) == std::vector<int64_t>{6, 7});
  CHECK(dist::MeshLayout(4, 1, 2).describe() ==
        "pp 2 x dp 2 x tp 1: rank 0 (pp 0, dp 0, tp 0), rank 1 (pp 0, dp 1, tp 0), rank 2 (pp 1, dp 0, tp 0), "
        "rank 3 (pp 1, dp 1, tp 0)");
  CHECK_THROWS_WITH(dist::MeshLayout(6, 2, 2),
                    Contains("pipeline parallel 2 x tensor parallel 2 does not divide the world of 6 ranks"));
}

TEST_CASE("a single process's mesh builds no group and runs no collective", "[unit][tp]") {
  config::DistConfig cfg;
  auto ctx = dist::DistContext::create(dist::LaunchEnv{}, cfg, torch::Device(torch::kCPU), "h");
  auto mesh = dist::DeviceMesh::create(*ctx, 1);
  CHECK(mesh->subgroups_built() == 0);
  for (auto d : {MeshDim::DP, MeshDim::TP}) {
    auto& g = mesh->group(d);
    CHECK_FALSE(g.active());
    auto t = torch::ones({3});
    g.all_reduce(t, dist::Reduce::Sum, "x");
    CHECK(torch::equal(t, torch::ones({3})));
    CHECK(g.all_gather(t, 0, "x").is_same(t));
    CHECK(g.reduce_scatter(t, 0, "x").is_same(t));
    CHECK(g.collectives() == 0);
  }
  CHECK_THROWS_WITH(dist::DeviceMesh::create(*ctx, 2), Contains("tensor parallel size 2 does not divide the world of 1 ranks"));
}

// As autocast runs one process's cross entropy: the loss in fp32 (a bf16 loss logged 4.21875 for
// 4.21588, found from outside 2026-12-06, and sent a bf16-rounded gradient back), the gradient in the
// logits' dtype.
TEST_CASE("vocab-parallel cross entropy on bf16 logits computes and returns the loss in fp32 and returns a bf16 "
          "gradient",
          "[unit][tp]") {
  auto gen = at::detail::createCPUGenerator(7);
  auto z = (torch::randn({6, 40}, gen) * 4).to(torch::kBFloat16).requires_grad_(true);
  auto target = torch::randint(40, {6}, gen, torch::kInt64);
  const auto shard = tpl::vocab_shard(40, 0, 1);
  auto loss = tpl::mean_over_targets(tpl::vocab_parallel_cross_entropy(z, target, shard, tpl::solo(), 0.1), target);
  loss.backward();
  auto zf = z.detach().to(torch::kFloat).requires_grad_(true);
  auto ref = F::cross_entropy(zf, target, F::CrossEntropyFuncOptions().label_smoothing(0.1));
  ref.backward();
  CHECK(loss.scalar_type() == torch::kFloat);
  CHECK(z.grad().scalar_type() == torch::kBFloat16);
  CHECK(std::abs(loss.item<double>() - ref.item<double>()) < 1e-6 * ref.item<double>());  // fp32 sums in another order
  CHECK(rel_err(z.grad().to(torch::kFloat), zf.grad()) < 1e-2);
}
