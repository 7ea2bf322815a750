// Tensor parallel over Gloo: 2 and 4 processes on loopback (tests/dist/spawn.hpp), each building the
// device mesh and running every case of tp_cases.hpp over its tp group; each rank writes its results
// (rank<r>.pt), and the test assembles the shards and compares them with the reference computed
// here in one process with plain torch: fp64, within 1e-10 relative.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "dist/device_mesh.hpp"
#include "dist/dist_context.hpp"
#include "dist/spawn.hpp"
#include "dist/tp_communicator.hpp"
#include "tp_results.hpp"

using namespace trainer;
using namespace trainer::test::tp;
using dist::MeshDim;

namespace {

constexpr double kTol = 1e-10;

std::map<std::string, torch::Tensor> mesh_facts(dist::DeviceMesh& mesh) {
  std::map<std::string, torch::Tensor> out;
  auto& tp = mesh.group(MeshDim::TP);
  auto& dp = mesh.group(MeshDim::DP);
  const auto c = mesh.coord();
  const int64_t rank = mesh.layout().rank_of(c);
  out["coord"] = torch::tensor({c.dp, c.tp, mesh.size(MeshDim::DP), mesh.size(MeshDim::TP), mesh.subgroups_built(),
                                static_cast<int64_t>(tp.collectives()), static_cast<int64_t>(dp.collectives())});
  auto s = torch::full({2}, static_cast<double>(rank + 1), torch::kFloat64);
  dp.all_reduce(s, dist::Reduce::Sum, "test");
  out["dp_sum"] = s;
  auto m = torch::full({1}, static_cast<double>(rank), torch::kFloat64);
  tp.all_reduce(m, dist::Reduce::Max, "test");
  out["tp_max"] = m;
  out["dp_gather"] = dp.all_gather(torch::full({2, 1}, static_cast<double>(rank), torch::kFloat64), 1, "test");
  auto ramp = torch::arange(2 * tp.size(), torch::kFloat64).reshape({2, tp.size()}) * static_cast<double>(rank + 1);
  out["tp_rs"] = tp.reduce_scatter(ramp, 1, "test");
  return out;
}

// The ranks' runs: world ranks, `tp` per group; returns the rank files after every rank exited 0.
std::vector<RankFile> run_world(int world, int tp, const std::string& dir_name) {
  auto procs = test::run_ranks("tp worker", world, dir_name, 600, {{"TRAINER_TP", std::to_string(tp)}});
  std::vector<RankFile> files;
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " output:\n" << procs[r].output());
    REQUIRE(procs[r].exit_code == 0);
    auto dir = procs[r].log.parent_path();
    files.push_back(load_results(dir / ("rank" + std::to_string(r) + ".pt")));
  }
  return files;
}

// Every result of every tp group against the reference; returns how many tensors were compared.
int compare_with_reference(std::vector<RankFile>& files, int tp) {
  const auto ref = reference(tp);
  int compared = 0;
  for (size_t first = 0; first < files.size(); first += tp) {  // one tp group: consecutive ranks
    for (const auto& [name, want] : ref) {
      INFO("tensor " << name << ", tp group of ranks " << first << ".." << first + tp - 1);
      std::vector<const Result*> shards;
      for (int r = 0; r < tp; ++r) {
        auto& rs = files[first + r].results;
        REQUIRE(rs.count(name) == 1);
        shards.push_back(&rs.at(name));
        REQUIRE_FALSE(rs.at(name).spec.partial_grad);  // summed over the group before it was written
      }
      if (shards[0]->spec.replicated()) {
        for (const auto* s : shards) {
          REQUIRE(s->value.sizes() == want.value.sizes());
          CHECK(rel_err(s->value, want.value) < kTol);
        }
      } else {
        auto a = assemble(shards);
        CHECK(torch::equal(a.covered, torch::ones_like(a.covered)));  // a partition of the global tensor
        // a padded vocabulary: the real part equals the reference, the padding is zero
        const int64_t dim = shards[0]->spec.dim, real = want.value.size(dim);
        REQUIRE(a.value.size(dim) >= real);
        CHECK(rel_err(a.value.narrow(dim, 0, real), want.value) < kTol);
        if (a.value.size(dim) > real)
          CHECK(a.value.narrow(dim, real, a.value.size(dim) - real).abs().max().item<double>() == 0.0);
      }
      ++compared;
    }
    for (int r = 0; r < tp; ++r) CHECK(files[first + r].results.size() == ref.size());
  }
  return compared;
}

void check_mesh_facts(std::vector<RankFile>& files, int tp) {
  const int world = static_cast<int>(files.size());
  const dist::MeshLayout layout(world, tp);
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    auto& f = files[r];
    const auto c = layout.coord(r);
    const auto coord = f.extra("coord");
    const bool split = tp > 1 && tp < world;  // only then does either dimension need a group of its own
    CHECK(torch::equal(coord, torch::tensor({c.dp, c.tp, static_cast<int64_t>(world / tp), static_cast<int64_t>(tp),
                                             split ? int64_t{2} : int64_t{0}, int64_t{0}, int64_t{0}})));
    double dp_sum = 0;
    std::vector<double> dp_members;
    for (auto m : layout.group_ranks(MeshDim::DP, r)) dp_sum += m + 1, dp_members.push_back(m);
    CHECK(torch::equal(f.extra("dp_sum"), torch::full({2}, dp_sum, torch::kFloat64)));
    CHECK(f.extra("tp_max").item<double>() == layout.group_ranks(MeshDim::TP, r).back());
    CHECK(torch::equal(f.extra("dp_gather"), torch::tensor(dp_members, torch::kFloat64).reshape({1, -1}).repeat({2, 1})));
    double tp_sum = 0;
    for (auto m : layout.group_ranks(MeshDim::TP, r)) tp_sum += m + 1;
    CHECK(torch::equal(f.extra("tp_rs"), torch::tensor({double(c.tp), double(tp + c.tp)}, torch::kFloat64).reshape({2, 1}) * tp_sum));
  }
}

}  // namespace

TEST_CASE("tp worker", "[.worker]") {
  if (!test::is_worker()) return;
  torch::set_num_threads(1);
  config::DistConfig cfg;
  cfg.timeout_s = 300;
  auto ctx = dist::DistContext::create(dist::detect_launch_env(), cfg, torch::Device(torch::kCPU), "tp-test");
  auto mesh = dist::DeviceMesh::create(*ctx, test::env_int("TRAINER_TP"));
  auto facts = mesh_facts(*mesh);
  dist::GroupCommunicator comm(mesh->group(MeshDim::TP));
  auto results = run_all(comm);
  facts["tp_seconds"] = torch::tensor({comm.seconds()}, torch::kFloat64);
  facts["tp_collectives"] = torch::tensor({static_cast<int64_t>(mesh->group(MeshDim::TP).collectives())});
  const std::filesystem::path dir = std::getenv("TRAINER_TEST_DIR");
  save_results(results, facts, dir / ("rank" + std::to_string(ctx->rank()) + ".pt"));
}

TEST_CASE("every tensor-parallel op, layer and block at T=2 equals one process (fp64, forward and backward)",
          "[dist][tp]") {
  auto files = run_world(2, 2, "tp2");
  check_mesh_facts(files, 2);
  CHECK(compare_with_reference(files, 2) > 60);
  for (auto& f : files) CHECK(f.extra("tp_collectives").item<int64_t>() > 50);
}

TEST_CASE("every tensor-parallel op, layer and block at T=4 (vocabulary 50257 padded) equals one process",
          "[dist][tp]") {
  auto files = run_world(4, 4, "tp4");
  check_mesh_facts(files, 4);
  CHECK(compare_with_reference(files, 4) > 60);
}

TEST_CASE("a 2-D mesh dp 2 x tp 2: its groups' collectives, and both tp groups equal one process", "[dist][tp]") {
  auto files = run_world(4, 2, "dp2tp2");
  check_mesh_facts(files, 2);
  CHECK(compare_with_reference(files, 2) > 120);  // each of the two tp groups
}

TEST_CASE("a mesh of T=1 over 2 ranks builds no subgroup and its layers are plain torch on each rank", "[dist][tp]") {
  auto files = run_world(2, 1, "tp1");
  check_mesh_facts(files, 1);
  CHECK(compare_with_reference(files, 1) > 120);  // each rank is its own tp group
  for (auto& f : files) {
    CHECK(f.extra("tp_collectives").item<int64_t>() == 0);  // no tp collective ran
    CHECK(f.extra("tp_seconds").item<double>() == 0.0);     // nor was one even called
  }
}
