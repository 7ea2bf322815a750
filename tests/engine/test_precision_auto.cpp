// train.precision auto: the rule (every branch, a pure function of the facts), the CPU's bf16 flags, and
// a run on this host that names a choice consistent with its flags and keeps it on resume.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "device/device.hpp"
#include "engine/startup/precision_auto.hpp"
#include "skip.hpp"
#include "test_util.hpp"

using namespace trainer;
using namespace trainer::engine;

namespace {
PrecisionFacts pa_cuda(int major, int minor) {
  PrecisionFacts f;
  f.cuda = true;
  f.cc_major = major;
  f.cc_minor = minor;
  return f;
}
PrecisionFacts pa_cpu(std::vector<std::string> flags, double fp32_ms = 0, double bf16_ms = 0) {
  PrecisionFacts f;
  f.cpu_bf16_flags = std::move(flags);
  f.fp32_ms = fp32_ms;
  f.bf16_ms = bf16_ms;
  f.probe_batch = 16;
  return f;
}
}  // namespace

TEST_CASE("precision auto on CUDA: bf16 from compute capability 8.0, fp16 on 7.x, fp32 below", "[unit]") {
  for (auto [major, minor] : {std::pair{8, 0}, std::pair{9, 0}, std::pair{12, 1}}) {
    const auto c = decide_precision(pa_cuda(major, minor));
    CHECK(c.precision == Precision::Bf16);
    CHECK_FALSE(c.needs_probe);
  }
  const auto volta = decide_precision(pa_cuda(7, 0)), turing = decide_precision(pa_cuda(7, 5));
  CHECK(volta.precision == Precision::Fp16);
  CHECK(turing.precision == Precision::Fp16);
  CHECK(turing.reason == "compute capability 7.5: fp16 tensor cores without bf16 (fp16 with the dynamic loss scaler)");
  const auto pascal = decide_precision(pa_cuda(6, 1));
  CHECK(pascal.precision == Precision::Fp32);
  CHECK(pascal.reason == "compute capability 6.1: no fp16 or bf16 tensor cores");
  CHECK(decide_precision(pa_cuda(8, 6)).reason == "compute capability 8.6: bf16 tensor cores");
  auto det = pa_cuda(8, 0);
  det.deterministic = true;  // not timed on CUDA: the capability decides, reproducibly
  CHECK(decide_precision(det).precision == Precision::Bf16);
}

TEST_CASE("precision auto on a CPU without avx512_bf16 or amx_bf16: fp32, never a probe", "[unit]") {
  const auto c = decide_precision(pa_cpu({}, 100, 10));  // even figures that favour bf16 do not count
  CHECK(c.precision == Precision::Fp32);
  CHECK_FALSE(c.needs_probe);
  CHECK(c.reason == "this CPU lists neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo: bf16 would be emulated, "
                    "slower than fp32");
}

TEST_CASE("precision auto on a CPU with native bf16: the probe decides, bf16 when at least 10 % faster", "[unit]") {
  const auto ask = decide_precision(pa_cpu({"avx512_bf16", "amx_bf16"}));
  CHECK(ask.needs_probe);
  CHECK(ask.precision == Precision::Fp32);
  const auto faster = decide_precision(pa_cpu({"avx512_bf16", "amx_bf16"}, 136.0, 80.0));
  CHECK_FALSE(faster.needs_probe);
  CHECK(faster.precision == Precision::Bf16);
  CHECK(faster.reason == "CPU flags avx512_bf16 amx_bf16; forward + backward at micro-batch 16, one thread's CPU time: "
                         "fp32 136.0 ms, bf16 80.0 ms (bf16 faster; bf16 is taken when at least 10 % faster)");
  CHECK(decide_precision(pa_cpu({"amx_bf16"}, 100.0, 90.0)).precision == Precision::Bf16);  // exactly 10 %
  const auto close = decide_precision(pa_cpu({"avx512_bf16"}, 100.0, 95.0));
  CHECK(close.precision == Precision::Fp32);
  CHECK(close.reason.find("bf16 less than 10 % faster") != std::string::npos);
  const auto slower = decide_precision(pa_cpu({"avx512_bf16"}, 20.0, 31.5));
  CHECK(slower.precision == Precision::Fp32);
  CHECK(slower.reason.find("fp32 20.0 ms, bf16 31.5 ms (bf16 slower") != std::string::npos);
  auto det = pa_cpu({"amx_bf16"}, 100, 10);
  det.deterministic = true;
  const auto d = decide_precision(det);
  CHECK(d.precision == Precision::Fp32);
  CHECK_FALSE(d.needs_probe);
  CHECK(d.reason == "CPU flags amx_bf16; run.deterministic: fp32 without timing (a timed choice is not reproducible)");
}

TEST_CASE("the CPU's bf16 flags are whole words of the first flags line of /proc/cpuinfo", "[unit]") {
  CHECK(device::bf16_flags_in("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16 avx512f avx512_bf16 amx_tile\n"
                              "flags\t\t: fpu\n") == std::vector<std::string>{"avx512_bf16", "amx_bf16"});
  CHECK(device::bf16_flags_in("flags\t\t: fpu sse avx2 fma\n").empty());          // an AVX2-only EPYC
  CHECK(device::bf16_flags_in("flags\t\t: avx512_bf16x xamx_bf16\n").empty());    // no part of a word
  CHECK(device::bf16_flags_in("flags\t\t: amx_bf16\n") == std::vector<std::string>{"amx_bf16"});  // last word
  CHECK(device::bf16_flags_in("").empty());
}

namespace {

// A small ResNet on synthetic images with train.precision auto (the default); `train` is the rest of
// the train section, `tail` more sections. Returns the file's path.
std::string probe_config(const std::filesystem::path& dir, const std::string& name, const std::string& train,
                         const std::string& tail) {
  test::write_file(dir / "exp.yaml",
                   "run: {name: " + name + ", out_dir: runs, seed: 1}\n"
                   "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 1, num_classes: 4}\n"
                   "data: {format: synthetic, workers: 1, synthetic: {num_samples: 128, val_samples: 16, image_size: 16}}\n"
                   "train: {batch_size: 16, " + train + "}\noptim: {name: sgd, lr: 0.05}\nlog: {progress: off}\n" + tail);
  return (dir / "exp.yaml").string();
}

}  // namespace

TEST_CASE("a run with precision auto logs and keeps a choice consistent with this CPU's flags", "[e2e]") {
  // the test reads the flags itself rather than through the code it checks
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  const bool native = flags.find(" avx512_bf16 ") != std::string::npos || flags.find(" amx_bf16 ") != std::string::npos;
  auto dir = test::scratch_dir("precision_auto_run");
  const std::string cfg = probe_config(dir, "pa", "max_steps: 2, log_every: 1, threads: 1",
                                       "checkpoint: {every_steps: 2}\n");
  auto first = test::run_trainer("run " + cfg);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const auto j = nlohmann::json::parse(test::read_file(dir / "runs/pa/autotune.json")).at("train.precision");
  const std::string choice = j.at("choice").get<std::string>();
  const double fp32_ms = j.at("fp32_ms").get<double>(), bf16_ms = j.at("bf16_ms").get<double>();
  INFO("autotune.json: " << j.dump());
  if (native) {
    CHECK(fp32_ms > 0);
    CHECK(bf16_ms > 0);
    CHECK(choice == (bf16_ms <= 0.9 * fp32_ms ? "bf16" : "fp32"));
    CHECK(j.at("probe_batch") == 16);
  } else {
    CHECK(choice == "fp32");
    CHECK(fp32_ms == 0);  // not timed
    CHECK(j.at("reason").get<std::string>().find("neither avx512_bf16 nor amx_bf16") != std::string::npos);
  }
  CHECK(first.output.find("train.precision auto: " + choice + " (" + j.at("reason").get<std::string>() + ")") !=
        std::string::npos);
  CHECK(first.output.find("precision " + choice + ",") != std::string::npos);  // the run's start line
  // the config as written stays auto; a resume computes in the precision the run started with
  CHECK(test::read_file(dir / "runs/pa/config.yaml").find("  precision: \"auto\"\n") != std::string::npos);
  auto second = test::run_trainer("run " + cfg + " --set train.max_steps=3 --set data.workers=auto");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK(second.output.find("train.precision auto: " + choice + " (kept from") != std::string::npos);
  // data.workers auto, which a resumed run may change to: on a CPU the cores train
  CHECK(second.output.find("data.workers auto: 2 (on a CPU the cores train: 2 loader threads)") != std::string::npos);
  auto check = test::run_trainer("check " + cfg);
  INFO(check.output);
  REQUIRE(check.exit_code == 0);
  CHECK(check.output.find("train.precision auto: ") != std::string::npos);
  if (!native) CHECK(check.output.find("train.precision auto: fp32 (this CPU lists neither") != std::string::npos);
  // without the data nothing is timed: a CPU with native bf16 gets no choice printed as made
  auto no_data = test::run_trainer("check --no-data " + cfg);
  INFO(no_data.output);
  REQUIRE(no_data.exit_code == 0);
  CHECK(no_data.output.find(native ? "train.precision auto: undecided, bf16 or fp32 (CPU flags "
                                   : "train.precision auto: fp32 (this CPU lists neither") != std::string::npos);
}

// The probe runs on one intra-op thread and gives the run its threads back; train.threads 0 counts the
// cores the process may run on (a `taskset -c 0` run took two threads onto one core).
TEST_CASE("after the precision probe the run has its intra-op threads, 0 = the usable cores", "[e2e]") {
  if (test::run_shell("command -v taskset").exit_code != 0) TRAINER_SKIP("no taskset to narrow the CPU affinity");
  auto dir = test::scratch_dir("precision_auto_threads");
  const std::string cfg = probe_config(dir, "pt", "max_steps: 1, threads: 3", "");
  auto three = test::run_trainer("run " + cfg + " --set run.name=three");
  INFO(three.output);
  REQUIRE(three.exit_code == 0);
  CHECK(three.output.find(", 3 intra-op threads, world size 1;") != std::string::npos);
  auto one_core = test::run_shell("taskset -c 0 \"" + std::string(TRAINER_BIN) + "\" run " + cfg +
                                  " --set run.name=one --set train.threads=0 2>&1");
  INFO(one_core.output);
  REQUIRE(one_core.exit_code == 0);
  CHECK(one_core.output.find(", 1 intra-op threads, world size 1;") != std::string::npos);
}
