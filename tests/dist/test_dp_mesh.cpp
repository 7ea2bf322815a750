// The data-parallel strategies over one dimension of the device mesh (issue 24): GradSync, ShardSync
// (each mode) and make_data_parallel's strategies run over the mesh's dp group with each rank's own
// parameters, which differ per tp coordinate. Gloo on CPU: a mesh dp 2 x tp 2 of 4 ranks (dp groups
// {0,2} and {1,3}), a plain 2-rank world (what one dp group must equal), and tp == world (a dp
// group of one: no dp collective). Each rank runs the hidden worker below and writes its results.
#include <catch2/catch.hpp>

#include <filesystem>

#include "dist/device_mesh.hpp"
#include "dist/dist_context.hpp"
#include "dist/grad_sync.hpp"
#include "dist/shard_sync.hpp"
#include "engine/parallel/data_parallel.hpp"
#include "spawn.hpp"

using namespace trainer;
using dist::Group;
using dist::MeshDim;
using dist::ShardSync;

namespace dp_mesh {  // named: the unity build puts this file beside the other tests' helpers

// Two units: fc1 (4 -> 5: 25 elements, odd, so a 2-way shard pads) and fc2 (5 -> 3: 18).
// Registration order: fc1.weight, fc1.bias, fc2.weight, fc2.bias.
struct Tiny : torch::nn::Module {
  Tiny() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 5));
    fc2 = register_module("fc2", torch::nn::Linear(5, 3));
  }
  // `gate`: ShardSync full's unit gate, as models::Model's forward calls it
  torch::Tensor forward(const torch::Tensor& x, ShardSync* gate) {  // x (B, 4) -> (B, 3)
    if (gate) gate->unit_enter(0);
    auto h = torch::tanh(fc1(x));  // (B, 5)
    if (gate) h = gate->unit_leave(0, h);
    if (gate) gate->unit_enter(1);
    auto y = fc2(h);  // (B, 3)
    if (gate) y = gate->unit_leave(1, y);
    return y;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

std::shared_ptr<Tiny> make_tiny(int64_t seed) {
  torch::manual_seed(seed);
  return std::make_shared<Tiny>();
}

torch::Tensor batch(int64_t seed) {
  auto gen = at::detail::createCPUGenerator(5000 + seed);
  return torch::randn({6, 4}, gen);  // (B, 4)
}

torch::Tensor loss_of(Tiny& n, const torch::Tensor& x, ShardSync* gate = nullptr) {
  return n.forward(x, gate).pow(2).mean();
}

torch::Tensor flat_of(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> parts;
  for (const auto& t : ts) parts.push_back(t.detach().reshape({-1}));
  return torch::cat(parts).clone();
}

std::vector<torch::Tensor> grads_of(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.grad());
  return out;
}

constexpr double kBucketMb = 64.0 / (1 << 20);  // 64 bytes: buckets {fc2.*} (18 elements), {fc1.*} (25)
constexpr int kSteps = 3, kMicro = 2;

// The data of a micro-step: by dp coordinate (tp peers read the same batch, as under tensor parallel).
torch::Tensor step_batch(int64_t dp_rank, int step, int micro) { return batch(100 * dp_rank + 10 * step + micro); }

// kSteps AdamW steps of kMicro micro-steps each through ShardSync over `dp`; the whole parameters after.
torch::Tensor sharded_steps(Group& dp, int64_t tp_coord, ShardSync::Grads mode) {
  auto net = make_tiny(100 + tp_coord);
  std::vector<std::vector<size_t>> units;
  if (mode == ShardSync::Grads::Full) units = {{0, 1}, {2, 3}};
  ShardSync sync(dp, net->parameters(), kBucketMb, mode, units);
  torch::optim::AdamW opt(sync.piece_values(), torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  ShardSync* gate = mode == ShardSync::Grads::Full ? &sync : nullptr;
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < kMicro; ++m) {
      sync.set_enabled(m == kMicro - 1);
      loss_of(*net, step_batch(dp.rank(), s, m), gate).backward();
    }
    sync.finish();
    opt.step();
    sync.gather_params();
  }
  sync.gather_all();  // full: the whole weights while we read them
  auto out = flat_of(net->parameters());
  sync.release_all(false);
  return out;
}

// The same steps in one process with plain AdamW on the parameters (what a dp group of one must give).
torch::Tensor plain_steps(int64_t tp_coord) {
  auto net = make_tiny(100 + tp_coord);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    for (int m = 0; m < kMicro; ++m) loss_of(*net, step_batch(0, s, m)).backward();
    opt.step();
  }
  return flat_of(net->parameters());
}

// dp rank 0's weights everywhere after the dp broadcast; the others start elsewhere.
std::shared_ptr<Tiny> start_net(const dist::MeshCoord& c, int64_t rank) {
  return make_tiny(c.dp == 0 ? 100 + c.tp : 1000 + rank);
}

// GradSync over dp: each rank's own gradients in, the mean over its dp group out (exact).
torch::Tensor check_grad_sync(dist::DistContext& ctx, dist::DeviceMesh& mesh, Group& dp) {
  const auto c = mesh.coord();
  auto net = start_net(c, ctx.rank());
  dp.broadcast_module(*net);
  auto want_w = make_tiny(100 + c.tp);
  CHECK(torch::equal(flat_of(net->parameters()), flat_of(want_w->parameters())));
  const uint64_t world_seq = ctx.next_seq(), dp_ops = dp.collectives();
  dist::GradSync sync(dp, net->parameters(), kBucketMb);
  CHECK(sync.buckets().size() == 2);
  // every rank its own gradients: the data by dp coordinate, the weights by tp coordinate
  loss_of(*net, batch(c.dp)).backward();
  sync.finish();
  // the reference: the ranks of this dp group backward one after another, / dp size
  auto ref = make_tiny(100 + c.tp);
  for (int64_t r : mesh.layout().group_ranks(MeshDim::DP, ctx.rank()))
    loss_of(*ref, batch(mesh.layout().coord(r).dp)).backward();
  auto want = flat_of(grads_of(*ref)) / static_cast<double>(dp.size());
  auto got = flat_of(grads_of(*net));
  CHECK(torch::equal(got, want));
  // the layout check and one all-reduce per bucket, on the dp group: a subgroup leaves the world's
  // numbering alone, the world group is the world
  const uint64_t ran = dp.active() ? 1 + sync.buckets().size() : 0;
  CHECK(dp.collectives() == dp_ops + ran);
  CHECK(ctx.next_seq() == world_seq + (dp.is_world() ? ran : 0));
  return got;
}

// The engine's strategies over dp: the fp16 overflow vote is the whole world's whenever the dp group
// is not the world (tp peers) or the strategy shards; a dp group of one runs no dp collective.
void check_strategies(dist::DistContext& ctx, dist::DeviceMesh& mesh, Group& dp) {
  for (auto sharding : {config::Sharding::None, config::Sharding::Optimizer}) {
    INFO("dist.sharding " << config::name_of(sharding));
    config::DistConfig cfg;
    cfg.sharding = sharding;
    cfg.bucket_mb = kBucketMb;
    auto par = engine::make_data_parallel(ctx, dp, cfg);
    auto net = start_net(mesh.coord(), ctx.rank());
    const uint64_t dp_ops = dp.collectives();
    par->prepare(*net, net->parameters());
    par->before_backward(true);
    loss_of(*net, batch(ctx.rank())).backward();
    par->after_backward();
    if (!dp.active()) {
      CHECK(dp.collectives() == dp_ops);
      CHECK_THAT(par->name(), Catch::Matchers::Contains("no data parallelism"));
    }
    auto flag = torch::full({1}, static_cast<float>(ctx.rank()));
    par->agree_flag(flag);
    const bool whole = dp.size() != ctx.world_size() || (sharding != config::Sharding::None && dp.active());
    const int64_t n = ctx.world_size();
    CHECK(flag.item<float>() == (whole ? static_cast<float>(n * (n - 1) / 2) : static_cast<float>(ctx.rank())));
  }
}

void check_all_ok(const std::vector<test::Proc>& procs) {
  for (size_t r = 0; r < procs.size(); ++r) {
    INFO("rank " << r << " output:\n" << procs[r].output());
    REQUIRE(procs[r].exit_code == 0);
  }
}

// [grads after GradSync, weights after AllReduce, ReduceScatter, Full] of each rank of a run.
std::vector<std::vector<torch::Tensor>> run_world(int world, int tp, const std::string& dir_name) {
  auto procs = test::run_ranks("worker: dp over the mesh", world, dir_name, 300, {{"TRAINER_TP", std::to_string(tp)}});
  check_all_ok(procs);
  std::vector<std::vector<torch::Tensor>> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    torch::load(out[static_cast<size_t>(r)], (procs[static_cast<size_t>(r)].log.parent_path() /
                                              ("rank" + std::to_string(r) + ".pt")).string());
    REQUIRE(out[static_cast<size_t>(r)].size() == 4);
  }
  return out;
}

const char* kModes[] = {"gradients after GradSync", "optimizer (ZeRO-1)", "gradients (ZeRO-2)", "full (ZeRO-3)"};

}  // namespace dp_mesh

TEST_CASE("worker: dp over the mesh", "[.worker]") {
  if (!test::is_worker()) return;
  using namespace dp_mesh;
  torch::set_num_threads(1);
  config::DistConfig cfg;
  cfg.timeout_s = 120;
  auto ctx = dist::DistContext::create(dist::detect_launch_env(), cfg, torch::Device(torch::kCPU), "dp-mesh");
  const int64_t tp = test::env_int("TRAINER_TP");
  auto mesh = dist::DeviceMesh::create(*ctx, tp);
  // T = 1: the world group itself, as the trainer passes it
  Group& dp = tp == 1 ? ctx->world_group() : mesh->group(MeshDim::DP);
  REQUIRE(dp.size() == ctx->world_size() / tp);
  CHECK(dp.is_world() == (tp == 1));
  CHECK(dp.collectives() == 0);

  std::vector<torch::Tensor> results{check_grad_sync(*ctx, *mesh, dp)};
  for (auto mode : {ShardSync::Grads::AllReduce, ShardSync::Grads::ReduceScatter, ShardSync::Grads::Full}) {
    const uint64_t world_seq = ctx->next_seq();
    results.push_back(sharded_steps(dp, mesh->coord().tp, mode));
    if (!dp.is_world()) CHECK(ctx->next_seq() == world_seq);  // every collective on the dp subgroup
    if (!dp.active()) CHECK(torch::equal(results.back(), plain_steps(mesh->coord().tp)));
  }
  if (!dp.active()) CHECK(dp.collectives() == 0);  // tp == world: not one dp collective
  check_strategies(*ctx, *mesh, dp);
  if (!dp.active()) CHECK(dp.collectives() == 0);
  torch::save(results, (std::filesystem::path(std::getenv("TRAINER_TEST_DIR")) /
                        ("rank" + std::to_string(ctx->rank()) + ".pt")).string());
}

TEST_CASE("dp x tp mesh: GradSync and ShardSync in each mode run over the dp groups 0+2 and 1+3 and equal a "
          "2-rank world bit for bit",
          "[dist][dp_mesh]") {
  if (test::is_worker()) return;
  using namespace dp_mesh;
  auto mesh = run_world(4, 2, "dp_mesh_4");
  auto plain = run_world(2, 1, "dp_mesh_world2");  // the dp group {0,2} alone, as a world
  for (size_t k = 0; k < 4; ++k) {
    INFO(kModes[k]);
    // replicas within a dp group, different parameters (so gradients and weights) across tp peers
    CHECK(torch::equal(mesh[0][k], mesh[2][k]));
    CHECK(torch::equal(mesh[1][k], mesh[3][k]));
    CHECK_FALSE(torch::equal(mesh[0][k], mesh[1][k]));
    // tp coordinate 0's dp group is the 2-rank world, bit for bit
    CHECK(torch::equal(mesh[0][k], plain[0][k]));
    CHECK(torch::equal(mesh[2][k], plain[1][k]));
  }
}

TEST_CASE("dp x tp mesh with tp == world: a dp group of one runs no dp collective and steps as one process",
          "[dist][dp_mesh]") {
  if (test::is_worker()) return;
  using namespace dp_mesh;
  auto r = run_world(2, 2, "dp_mesh_tp2");  // the worker checks dp.collectives() == 0 and plain AdamW
  for (size_t k = 0; k < 4; ++k) {
    INFO(kModes[k]);
    CHECK_FALSE(torch::equal(r[0][k], r[1][k]));  // each tp coordinate its own parameters
  }
}
