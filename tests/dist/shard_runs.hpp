// The sharding tests' runs (test_sharding.cpp, test_sharding_full.cpp): tiny models trained in each
// dist.sharding mode, their losses compared with none's, checkpoints saved and resumed at other world
// sizes, exported files read back.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/ckpt_runs.hpp"
#include "dist/launcher.hpp"
#include "spawn.hpp"
#include "train_runs.hpp"
#include <fmt/format.h>

namespace trainer::shard_test {

namespace fs = std::filesystem;

inline constexpr size_t kShardSteps = 30;

inline test::TrainRun shard_run(const std::filesystem::path& dir, const std::string& cfg, int world, const std::string& mode,
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

inline void check_same_as_none(const test::TrainRun& none, const test::TrainRun& sharded, const std::string& what) {
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

inline void check_modes(const std::string& scratch, int world, const std::string& extra, const std::string& yaml = "") {
  auto dir = test::scratch_dir(scratch);
  std::string cfg;
  if (yaml.empty()) {
    cfg = test::write_tiny_gpt_config(dir).string();
  } else {
    test::write_file(dir / "tiny.yaml", yaml);
    cfg = (dir / "tiny.yaml").string();
  }
  auto none = shard_run(dir, cfg, world, "none", extra);
  for (const std::string mode : {"optimizer", "gradients", "full"}) {
    auto s = shard_run(dir, cfg, world, mode, extra);
    const std::string banner = mode == "optimizer" ? "ZeRO-1" : mode == "gradients" ? "ZeRO-2" : "ZeRO-3";
    CHECK(s.output.find(banner) != std::string::npos);  // the strategy really ran
    check_same_as_none(none, s, mode + " at " + std::to_string(world) + " ranks" + extra);
  }
}

// A small ViT on synthetic 8x8 images (one patch: it learns within the steps), for the same
// comparison with per-block activation checkpointing.
inline constexpr const char* kShardVitYaml = R"(run:
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
inline constexpr const char* kShardResnetYaml = R"(run:
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



// 12 steps of 16 samples (4 per micro-batch), checkpoints at 6 and 12: 4 ranks x 1, 2 x 2, 1 x 4.
inline const std::string kShardCkptArgs =
    " --set train.batch_size=4 --set train.global_batch_size=16 --set train.max_steps=12 --set checkpoint.every_steps=6";

// `trainer ...` arguments: `cfg` on `world` ranks in `mode` (1: a single process, no sharding).
inline std::string shard_launch(int world, const std::string& mode, const std::string& cfg) {
  if (world == 1) return "run " + cfg;
  return "launch -n " + std::to_string(world) + " -- run " + cfg + " --set dist.sharding=" + mode;
}

inline test::CommandResult shard_trainer(const std::string& args) {
  return test::run_shell(fmt::format("\"{}\" {}", TRAINER_BIN, args));  // (literal + string: GCC 12 false positive)
}

// A run of `world` ranks in `mode` under `out`, the whole 12 steps; its step-6 checkpoint is the
// one the resume tests start from.
inline fs::path saved_run(const fs::path& dir, const std::string& cfg, int world, const std::string& mode,
                   const std::string& name) {
  auto r = shard_trainer(shard_launch(world, mode, cfg) + kShardCkptArgs + " --out-dir " + (dir / name).string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return dir / name / "tiny";
}

// Resumes the step-6 checkpoint of `saved` on `world` ranks in `mode`; its steps 7..12 log the
// losses of the uninterrupted run.
inline void check_resumed(const fs::path& dir, const std::string& cfg, const fs::path& saved, int world,
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



struct ExportedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// An fp32 safetensors file read by its format (8-byte little-endian header size, JSON header,
// data): test_dist links the dist library only, not io's reader.
inline std::map<std::string, ExportedTensor> read_fp32_safetensors(const std::filesystem::path& path) {
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


}  // namespace trainer::shard_test
