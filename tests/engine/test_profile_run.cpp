// profile.steps end to end: the trace and the ops table of a short run.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/memory_runs.hpp"
#include "test_util.hpp"

using namespace trainer;

TEST_CASE("profile.steps writes a Chrome trace and an ops table of the recorded steps", "[e2e]") {
  auto dir = test::scratch_dir("profile_run");
  const auto cfg = test::auto_config(dir);
  auto run = test::run_trainer("run " + cfg + " --set train.batch_size=8 --set train.max_steps=5 --set profile.steps=2 "
                               "--set profile.start_step=2 --out-dir " + (dir / "runs").string());
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("profile: recording steps 3..4") != std::string::npos);
  CHECK(run.output.find("profile: 2 steps") != std::string::npos);
  // a CPU run on LibTorch's CUDA build: libkineto's "ERROR: ... gpuGetDeviceCount failed" is muted
  // (where a GPU and its driver are, the call succeeds and prints nothing)
  CHECK(run.output.find("gpuGetDeviceCount") == std::string::npos);
  auto trace = nlohmann::json::parse(test::read_file(dir / "runs/auto/profile/trace_rank0.json"), nullptr, false);
  REQUIRE(trace.is_object());
  // global batch 16 of micro-batches 8: two forward/backward scopes and one optimizer scope per step
  int64_t micro = 0, optim = 0;
  for (const auto& e : trace.at("traceEvents")) {
    micro += e.value("name", "") == "trainer::forward_backward";
    optim += e.value("name", "") == "trainer::optimizer";
  }
  CHECK(micro == 4);
  CHECK(optim == 2);
  const auto table = test::read_file(dir / "runs/auto/profile/ops_rank0.txt");
  CHECK(table.find("2 steps recorded") != std::string::npos);
  CHECK(table.find("aten::addmm") != std::string::npos);  // the GPT's linear layers
  CHECK(table.find("aten::_fused_adamw_") != std::string::npos);  // optim.fused: one kernel per step
}
