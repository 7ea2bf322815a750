// `trainer check` in a launched job: rank table, all-reduce bus bandwidth, store exposure warning.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <regex>

#include "dist/dist_check.hpp"
#include "spawn.hpp"
#include "train_runs.hpp"

using namespace trainer;
using Catch::Matchers::Contains;

namespace {

dist::LaunchEnv single_node(const std::string& master, int64_t world = 2) {
  dist::LaunchEnv e;
  e.launcher = "torchrun";
  e.world_size = world;
  e.local_world_size = world;
  e.master_addr = master;
  e.master_port = 29500;
  return e;
}

}  // namespace

TEST_CASE("bus bandwidth is 2(n-1)/n x bytes / time, and 0 for one rank", "[unit]") {
  const double bytes = 64.0 * (1 << 20);
  CHECK(dist::allreduce_bus_bandwidth(bytes, 2, 0.1) == Approx(bytes / 0.1));
  CHECK(dist::allreduce_bus_bandwidth(bytes, 4, 0.1) == Approx(1.5 * bytes / 0.1));
  CHECK(dist::allreduce_bus_bandwidth(bytes, 8, 0.5) == Approx(1.75 * bytes / 0.5));
  CHECK(dist::allreduce_bus_bandwidth(bytes, 1, 0.1) == 0.0);
  CHECK(dist::median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(dist::median({4.0, 1.0, 3.0, 2.0, 9.0}) == 3.0);
}

TEST_CASE("the store warning fires only for a single-node job whose store listens beyond loopback", "[unit]") {
  config::DistConfig cfg;
  CHECK_FALSE(dist::store_exposure_warning(single_node("127.0.0.1"), cfg));
  CHECK_FALSE(dist::store_exposure_warning(single_node("localhost"), cfg));
  CHECK_FALSE(dist::store_exposure_warning(single_node("10.1.2.3", 1), cfg));  // one process: no store at all

  auto exposed = dist::store_exposure_warning(single_node("10.1.2.3"), cfg);
  REQUIRE(exposed);
  CHECK(*exposed ==
        "the rendezvous store at 10.1.2.3:29500 listens on every network interface (MASTER_ADDR is not a loopback "
        "address), although all 2 ranks run on this node; set MASTER_ADDR=127.0.0.1 to keep it on loopback");

  auto multi_node = single_node("10.1.2.3", 8);
  multi_node.local_world_size = 4;  // two nodes: the store must be reachable from the other one
  CHECK_FALSE(dist::store_exposure_warning(multi_node, cfg));

  auto agent = single_node("127.0.0.1");
  agent.agent_store = true;  // torchrun's agent binds every interface whatever MASTER_ADDR says
  auto w = dist::store_exposure_warning(agent, cfg);
  REQUIRE(w);
  CHECK_THAT(*w, Contains("hosted by torchrun's agent, which listens on every network interface"));

  config::DistConfig file_store;
  file_store.store = "file:///shared/rdzv";
  CHECK_FALSE(dist::store_exposure_warning(single_node("10.1.2.3"), file_store));
}

TEST_CASE("trainer launch -n 2 -- check prints the rank table and the all-reduce bus bandwidth", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("dist_check");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto r = test::run_trainer("launch -n 2 -- check " + cfg);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  CHECK_THAT(r.output, Contains("[rank0] distributed: 2 ranks (trainer launch), backend gloo, store tcp://127.0.0.1:"));
  CHECK(std::regex_search(r.output, std::regex("\\[rank0\\]   rank  local  host +device +network\n")));
  for (int k = 0; k < 2; ++k)  // one node: Gloo stays on loopback
    CHECK(std::regex_search(r.output, std::regex("\\[rank0\\]   " + std::to_string(k) + " +" + std::to_string(k) +
                                                 " +" + std::string(host) + " +cpu +lo 127\\.0\\.0\\.1 \\(every rank on this node\\)\n")));
  CHECK(r.output.find("[rank1]") == std::string::npos);  // rank 0 alone prints the summary and the table
  CHECK_THAT(r.output, Contains("[rank0] config " + cfg + ": ok (hash "));
  CHECK(r.output.find("warning: the rendezvous store") == std::string::npos);  // trainer launch: loopback only

  std::smatch m;
  REQUIRE(std::regex_search(r.output, m,
                            std::regex("all_reduce of 64 MiB float32 over 2 ranks: median ([0-9.]+) ms of 5, "
                                       "algbw ([0-9.]+) GB/s, busbw ([0-9.]+) GB/s")));
  const double ms = std::stod(m[1]), algbw = std::stod(m[2]), busbw = std::stod(m[3]);
  REQUIRE(ms > 0);
  // two ranks: 2(n-1)/n = 1, so bus and algorithm bandwidth agree, and both are bytes / time
  CHECK(busbw == Approx(algbw).margin(0.011));
  CHECK(algbw == Approx(64.0 * (1 << 20) / (ms / 1e3) / 1e9).epsilon(0.01).margin(0.011));
}

TEST_CASE("trainer check without a launcher prints no rank table", "[e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("dist_check_single");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto r = test::run_trainer("check " + cfg);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("distributed:") == std::string::npos);
  CHECK(r.output.find("all_reduce") == std::string::npos);
}
