// dist.sharding changes what each rank holds, never the arithmetic: a sharded run at N ranks logs
// the losses of a dist.sharding: none run at N ranks (fp32, deterministic kernels) within 1e-6
// relative for the first 10 steps and 1e-4 for 30: the sharded runs differ only in the order of
// floating-point sums (reduce-scatter vs all-reduce, the clipping norm summed over slices).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/ckpt_runs.hpp"
#include "dist/launcher.hpp"
#include "skip.hpp"
#include "spawn.hpp"
#include "train_runs.hpp"

using namespace trainer;

namespace {

constexpr size_t kShardSteps = 30;

test::TrainRun shard_run(const std::filesystem::path& dir, const std::string& cfg, int world, const std::string& mode,
                         const std::string& extra) {
  auto run = test::train_tiny_gpt("", "launch -n " + std::to_string(world) + " -- run " + cfg +
                                          " --set train.max_steps=30 --set dist.sharding=" + mode + extra,
                                  dir / mode);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.losses.size() == kShardSteps);
  REQUIRE(run.world_size == world);
  return run;
}

void check_same_as_none(const test::TrainRun& none, const test::TrainRun& sharded, const std::string& what) {
  double worst10 = 0, worst30 = 0;
  for (size_t i = 0; i < kShardSteps; ++i) {
    const double rel = std::abs(sharded.losses[i] - none.losses[i]) / std::abs(none.losses[i]);
    (i < 10 ? worst10 : worst30) = std::max(i < 10 ? worst10 : worst30, rel);
    INFO(what << ", step " << i + 1 << ": none " << none.losses[i] << ", sharded " << sharded.losses[i]);
    CHECK(rel <= (i < 10 ? 1e-6 : 1e-4));
  }
  WARN(what << ": max relative loss difference to none " << worst10 << " (steps 1-10), " << worst30
            << " (steps 11-30)");
  CHECK(none.losses.back() < none.losses.front() - 0.1);  // the runs learn: the comparison means something
}

void check_modes(const std::string& scratch, int world, const std::string& extra, const std::string& yaml = "") {
  auto dir = test::scratch_dir(scratch);
  std::string cfg;
  if (yaml.empty()) {
    cfg = test::write_tiny_gpt_config(dir).string();
  } else {
    test::write_file(dir / "tiny.yaml", yaml);
    cfg = (dir / "tiny.yaml").string();
  }
  auto none = shard_run(dir, cfg, world, "none", extra);
  for (const std::string mode : {"optimizer", "gradients"}) {
    auto s = shard_run(dir, cfg, world, mode, extra);
    const std::string banner = mode == "optimizer" ? "ZeRO-1" : "ZeRO-2";
    CHECK(s.output.find(banner) != std::string::npos);  // the strategy really ran
    check_same_as_none(none, s, mode + " at " + std::to_string(world) + " ranks" + extra);
  }
}

// A small ViT on synthetic 8x8 images (one patch: it learns within the steps), for the same
// comparison with per-block activation checkpointing.
constexpr const char* kShardVitYaml = R"(run:
  name: tiny
  seed: 3
  deterministic: true
model:
  arch: vit
  in_channels: 1
  num_classes: 4
  image_size: 8
  patch_size: 8
  num_layers: 2
  num_heads: 2
  hidden_dim: 16
  mlp_dim: 32
  activation_checkpointing: true
data:
  format: synthetic
  workers: 1
  synthetic:
    num_samples: 1024
    val_samples: 32
    image_size: 8
train:
  batch_size: 8
  device: cpu
  threads: 1
  log_every: 1
optim:
  name: adamw
  lr: 0.01
  weight_decay: 0.01
dist:
  timeout_s: 60
log:
  progress: "off"
)";

// A small ResNet, channels-last (its conv weights keep their strides inside the flat buckets) with
// per-stage activation checkpointing; BatchNorm statistics stay per rank in every mode alike.
constexpr const char* kShardResnetYaml = R"(run:
  name: tiny
  seed: 3
  deterministic: true
model:
  arch: resnet
  depth: 8
  in_channels: 1
  num_classes: 4
  channels_last: true
  activation_checkpointing: true
data:
  format: synthetic
  workers: 1
  synthetic:
    num_samples: 1024
    val_samples: 32
    image_size: 8
train:
  batch_size: 8
  device: cpu
  threads: 1
  log_every: 1
optim:
  name: sgd
  lr: 0.05
dist:
  timeout_s: 60
log:
  progress: "off"
)";

}  // namespace

TEST_CASE("sharding: a ViT with activation checkpointing logs the losses of none at 2 ranks", "[dist][e2e]") {
  if (test::is_worker()) return;
  check_modes("shard_equiv_vit", 2, " --set train.grad_clip=1.0", kShardVitYaml);
}

TEST_CASE("sharding: a channels-last ResNet with activation checkpointing logs the losses of none at 2 ranks",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  check_modes("shard_equiv_resnet", 2, " --set train.grad_clip=1.0", kShardResnetYaml);
}

TEST_CASE("sharding: optimizer and gradients log the losses of none at 2 ranks, grad_accum 2 and grad_clip",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  check_modes("shard_equiv_2", 2, " --set train.batch_size=4 --set train.grad_accum=2 --set train.grad_clip=0.5");
}

TEST_CASE("sharding: optimizer and gradients log the losses of none at 3 ranks (uneven shards), grad_clip",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  check_modes("shard_equiv_3", 3, " --set train.grad_clip=0.5 --set dist.bucket_mb=0.01");
}

// Without clipping: with it, the sharded norm (summed over slices) differs from none's in its last
// bits, and bf16's rounding of the weights amplifies that to ~3e-4 relative after 20 steps.
TEST_CASE("sharding: bf16 autocast with SGD and momentum logs the losses of none at 2 ranks", "[dist][e2e]") {
  if (test::is_worker()) return;
  check_modes("shard_equiv_bf16_sgd", 2,
              " --set train.precision=bf16 --set optim.name=sgd --set optim.lr=0.1 --set optim.momentum=0.9");
}

TEST_CASE("sharding: full is refused as not implemented, naming the key, exit 2", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_full");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto r = test::run_shell("\"" + std::string(TRAINER_BIN) + "\" launch -n 2 -- run " + cfg +
                           " --set dist.sharding=full --out-dir " + (dir / "out").string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("dist.sharding: full is not implemented yet") != std::string::npos);
}

namespace {

namespace fs = std::filesystem;

// 12 steps of 16 samples (4 per micro-batch), checkpoints at 6 and 12: 4 ranks x 1, 2 x 2, 1 x 4.
const std::string kShardCkptArgs =
    " --set train.batch_size=4 --set train.global_batch_size=16 --set train.max_steps=12 --set checkpoint.every_steps=6";

// `trainer ...` arguments: `cfg` on `world` ranks in `mode` (1: a single process, no sharding).
std::string shard_launch(int world, const std::string& mode, const std::string& cfg) {
  if (world == 1) return "run " + cfg;
  return "launch -n " + std::to_string(world) + " -- run " + cfg + " --set dist.sharding=" + mode;
}

test::CommandResult shard_trainer(const std::string& args) {
  return test::run_shell("\"" + std::string(TRAINER_BIN) + "\" " + args);
}

// A run of `world` ranks in `mode` under `out`, the whole 12 steps; its step-6 checkpoint is the
// one the resume tests start from.
fs::path saved_run(const fs::path& dir, const std::string& cfg, int world, const std::string& mode,
                   const std::string& name) {
  auto r = shard_trainer(shard_launch(world, mode, cfg) + kShardCkptArgs + " --out-dir " + (dir / name).string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return dir / name / "tiny";
}

// Resumes the step-6 checkpoint of `saved` on `world` ranks in `mode`; its steps 7..12 log the
// losses of the uninterrupted run.
void check_resumed(const fs::path& dir, const std::string& cfg, const fs::path& saved, int world,
                   const std::string& mode, const std::string& name) {
  fs::create_directories(dir / name / "tiny/checkpoints");
  fs::copy(saved / "checkpoints/step-6", dir / name / "tiny/checkpoints/step-6", fs::copy_options::recursive);
  auto r = shard_trainer(shard_launch(world, mode, cfg) + kShardCkptArgs + " --out-dir " + (dir / name).string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("resumed from") != std::string::npos);
  auto a = test::train_losses(saved / "metrics.jsonl");
  auto b = test::train_losses(dir / name / "tiny/metrics.jsonl");
  REQUIRE(a.size() == 12);
  REQUIRE(b.size() == 6);
  for (int64_t s = 7; s <= 12; ++s) {
    INFO(name << ", step " << s << ": uninterrupted " << a.at(s) << ", resumed " << b.at(s));
    CHECK(std::abs(b.at(s) - a.at(s)) <= 1e-6 * std::abs(a.at(s)));
  }
}

}  // namespace

TEST_CASE("sharding: a 4-rank sharded checkpoint resumes on 2 sharded ranks and on 1 process", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_ckpt_4");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto saved = saved_run(dir, cfg, 4, "gradients", "saved");
  const auto step6 = saved / "checkpoints/step-6";
  // every rank wrote its own shard; no whole optimizer file
  for (int r = 0; r < 4; ++r)
    CHECK(fs::exists(step6 / ("optimizer-shard-" + std::to_string(r) + "-of-4.safetensors")));
  CHECK_FALSE(fs::exists(step6 / "optimizer.safetensors"));
  CHECK(test::read_file(step6 / "manifest.json").find("optimizer-shard-3-of-4.safetensors") != std::string::npos);
  check_resumed(dir, cfg, saved, 2, "optimizer", "on2");
  check_resumed(dir, cfg, saved, 1, "none", "on1");
}

TEST_CASE("sharding: a replicated 2-rank checkpoint resumes sharded on 4 ranks", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_ckpt_from_ddp");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto saved = saved_run(dir, cfg, 2, "none", "saved");
  CHECK(fs::exists(saved / "checkpoints/step-6/optimizer.safetensors"));
  check_resumed(dir, cfg, saved, 4, "gradients", "on4");
}

TEST_CASE("sharding: a missing or corrupt shard is refused naming the file, an unfinished save is never taken",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_ckpt_bad");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto saved = saved_run(dir, cfg, 2, "optimizer", "saved");
  const auto step6 = saved / "checkpoints/step-6", step12 = saved / "checkpoints/step-12";
  const auto shard1 = step6 / "optimizer-shard-1-of-2.safetensors";
  REQUIRE(fs::exists(shard1));

  // as a kill -9 between the shards and the manifest leaves it: step-12 without a manifest, and a
  // dead writer's staged shard; resume takes step 6 and removes the stale file
  fs::remove(step12 / "manifest.json");
  test::write_file(saved / "checkpoints/.step-12.optimizer-shard-1-of-2.staged-999999", "partial");
  auto r = shard_trainer(shard_launch(2, "optimizer", cfg) + kShardCkptArgs + " --out-dir " + (dir / "saved").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("resumed from " + step6.string()) != std::string::npos);
  CHECK_FALSE(fs::exists(saved / "checkpoints/.step-12.optimizer-shard-1-of-2.staged-999999"));

  // a flipped byte in a shard: refused, naming the file
  {
    std::string bytes = test::read_file(shard1);
    bytes[bytes.size() - 3] ^= 0x55;
    test::write_file(shard1, bytes);
  }
  auto bad = shard_trainer(shard_launch(2, "optimizer", cfg) + kShardCkptArgs + " --resume " + step6.string() +
                           " --out-dir " + (dir / "bad").string());
  INFO(bad.output);
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find(shard1.string()) != std::string::npos);
  CHECK(bad.output.find("checksum mismatch") != std::string::npos);

  fs::remove(shard1);
  auto missing = shard_trainer(shard_launch(2, "optimizer", cfg) + kShardCkptArgs + " --resume " + step6.string() +
                               " --out-dir " + (dir / "missing").string());
  INFO(missing.output);
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find(shard1.string() + ": missing") != std::string::npos);
}

TEST_CASE("sharding: at 4 ranks each rank holds 1/4 of the optimizer state, and with gradients 1/4 of them",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_memory");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  std::map<std::string, nlohmann::json> rec;
  for (const std::string mode : {"none", "optimizer", "gradients"}) {
    auto r = shard_trainer("launch -n 4 -- run " + cfg + " --set train.max_steps=2 --set dist.sharding=" + mode +
                           " --out-dir " + (dir / mode).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    for (const auto& j : test::records(dir / mode / "tiny/metrics.jsonl", "train")) rec[mode] = j;
    REQUIRE(rec.count(mode));
  }
  const auto bytes = [&](const std::string& mode, const char* key) { return rec[mode].at(key).get<double>(); };
  const double params = bytes("none", "param_bytes");
  WARN("rank 0 bytes (params / grads / optimizer): none " << params << " / " << bytes("none", "grad_bytes") << " / "
       << bytes("none", "optim_state_bytes") << "; optimizer " << bytes("optimizer", "param_bytes") << " / "
       << bytes("optimizer", "grad_bytes") << " / " << bytes("optimizer", "optim_state_bytes") << "; gradients "
       << bytes("gradients", "param_bytes") << " / " << bytes("gradients", "grad_bytes") << " / "
       << bytes("gradients", "optim_state_bytes"));
  CHECK(bytes("none", "optim_state_bytes") == 2 * params);  // AdamW: two fp32 states per parameter
  for (const std::string mode : {"optimizer", "gradients"}) {
    INFO(mode);
    // rank 0 owns a full chunk of every bucket: a quarter, plus at most a few padding elements
    CHECK(bytes(mode, "optim_state_bytes") >= bytes("none", "optim_state_bytes") / 4);
    CHECK(bytes(mode, "optim_state_bytes") <= bytes("none", "optim_state_bytes") / 4 * 1.01);
  }
  // ZeRO-2 keeps only its gradient slice; DDP the gradients and its buckets
  CHECK(bytes("gradients", "grad_bytes") >= params / 4);
  CHECK(bytes("gradients", "grad_bytes") <= params / 4 * 1.01);
  CHECK(bytes("none", "grad_bytes") == 2 * params);
}

TEST_CASE("sharding: optimizer and gradients under torchrun and mpirun log the losses of trainer launch with none",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  const char* venv = std::getenv("TRAINER_VENV");
  const char* home = std::getenv("HOME");
  const std::string torchrun =
      std::string(venv ? venv : std::string(home ? home : "/root") + "/.cache/trainer/venv-torch-2.11.0") +
      "/bin/torchrun";
  const auto mpi = test::run_shell("command -v mpirun");
  if (!std::filesystem::exists(torchrun) || mpi.exit_code != 0) TRAINER_SKIP("needs torchrun and mpirun");
  const std::string mpirun = mpi.output.substr(0, mpi.output.find('\n'));
  auto dir = test::scratch_dir("shard_launchers");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto none = shard_run(dir, cfg, 2, "none", "");
  const std::string args = "run " + cfg + " --set train.max_steps=30";
  auto tr = test::train_tiny_gpt(torchrun + " --no_python --nproc_per_node 2 --master_addr 127.0.0.1 --master_port " +
                                     std::to_string(dist::free_local_port()),
                                 args + " --set dist.sharding=gradients", dir / "torchrun");
  auto mp = test::train_tiny_gpt(mpirun + " --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1",
                                 args + " --set dist.sharding=optimizer --set dist.store=file://" +
                                     (dir / "rendezvous").string(),
                                 dir / "mpirun");
  for (const auto* run : {&tr, &mp}) {
    INFO(run->output);
    REQUIRE(run->exit_code == 0);
    REQUIRE(run->losses.size() == kShardSteps);
    CHECK(run->world_size == 2);
  }
  CHECK(tr.output.find("ZeRO-2") != std::string::npos);
  CHECK(mp.output.find("ZeRO-1") != std::string::npos);
  check_same_as_none(none, tr, "gradients under torchrun");
  check_same_as_none(none, mp, "optimizer under mpirun");
}

namespace {

struct ExportedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// An fp32 safetensors file read by its format (8-byte little-endian header size, JSON header,
// data): test_dist links the dist library only, not io's reader.
std::map<std::string, ExportedTensor> read_fp32_safetensors(const std::filesystem::path& path) {
  const std::string bytes = test::read_file(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE(8 + n <= bytes.size());
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::map<std::string, ExportedTensor> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    REQUIRE(e.at("dtype") == "F32");
    ExportedTensor t;
    t.shape = e.at("shape").get<std::vector<int64_t>>();
    const auto begin = e.at("data_offsets").at(0).get<size_t>(), end = e.at("data_offsets").at(1).get<size_t>();
    t.values.resize((end - begin) / 4);
    std::memcpy(t.values.data(), bytes.data() + 8 + n + begin, end - begin);
    out[name] = std::move(t);
  }
  return out;
}

}  // namespace

TEST_CASE("sharding: trainer export of a sharded run writes the whole model, as a replicated run's", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_export");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  std::map<std::string, std::map<std::string, ExportedTensor>> exported;
  for (const std::string mode : {"none", "gradients"}) {
    auto r = shard_trainer("launch -n 3 -- run " + cfg + " --set train.max_steps=5 --set dist.sharding=" + mode +
                           " --out-dir " + (dir / mode).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const auto out = dir / (mode + ".safetensors");
    auto e = shard_trainer("export " + (dir / mode / "tiny/checkpoints").string() + " --out " + out.string());
    INFO(e.output);
    REQUIRE(e.exit_code == 0);
    exported[mode] = read_fp32_safetensors(out);
  }
  const auto& a = exported["none"];
  const auto& b = exported["gradients"];
  REQUIRE(a.size() == b.size());
  REQUIRE(a.count("lm_head.weight"));  // nanoGPT names, as tests/python/test_export_interop.py loads them
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name));
    REQUIRE(b.at(name).shape == t.shape);
    double worst = 0;
    for (size_t i = 0; i < t.values.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::abs(t.values[i] - b.at(name).values[i])));
    CHECK(worst <= 1e-5);  // float rounding of 5 steps
  }
}

TEST_CASE("sharding: kill -9 of a 2-rank sharded run saving every step never leaves a checkpoint taken as complete",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_kill9");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  // a checkpoint after every step: most kills land in a save (staged shards, a temporary folder,
  // the rename); the launcher's ranks die with it (PDEATHSIG)
  const std::string args = "launch -n 2 -- run " + cfg +
                           " --set train.max_steps=100000 --set checkpoint.every_steps=1 --set checkpoint.keep_last=2"
                           " --set dist.sharding=gradients --out-dir " + (dir / "out").string();
  const double kill_after_s[] = {2.5, 3.1, 3.7, 4.3};
  for (double s : kill_after_s) {
    auto r = test::run_shell("timeout -s KILL " + std::to_string(s) + "s \"" + std::string(TRAINER_BIN) + "\" " + args);
    INFO("killed after " << s << " s:\n" << r.output);
    REQUIRE(r.exit_code == 137);  // killed: never a failed start or resume
  }
  // every folder with a manifest holds both shards; the next run resumes from a verified one
  int complete = 0;
  int64_t newest = 0;
  for (const auto& e : fs::directory_iterator(dir / "out/tiny/checkpoints")) {
    const auto name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::exists(e.path() / "manifest.json")) continue;
    ++complete;
    newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
    for (int r = 0; r < 2; ++r)
      CHECK(fs::exists(e.path() / ("optimizer-shard-" + std::to_string(r) + "-of-2.safetensors")));
  }
  CHECK(complete >= 1);
  // a few steps past the newest checkpoint
  auto last = test::run_shell("\"" + std::string(TRAINER_BIN) + "\" " + args +
                              " --set train.max_steps=" + std::to_string(newest + 5));
  INFO(last.output);
  REQUIRE(last.exit_code == 0);
  CHECK(last.output.find("resumed from") != std::string::npos);
}
