// dist.sharding changes what each rank holds, never the arithmetic: a sharded run at N ranks logs
// the losses of a dist.sharding: none run at N ranks (fp32, deterministic kernels) within 1e-6
// relative for the first 10 steps and 1e-4 for 30: the sharded runs differ only in the order of
// floating-point sums (reduce-scatter vs all-reduce, the clipping norm summed over slices).
// dist.sharding full's own tests (memory, checkpoints, export): test_sharding_full.cpp.
#include <catch2/catch.hpp>

#include <iterator>
#include <random>
#include <sstream>
#include <thread>

#include "ckpt/hardening_util.hpp"
#include "dist/shard_runs.hpp"
#include "skip.hpp"

using namespace trainer;
using namespace trainer::shard_test;

namespace fs = std::filesystem;


TEST_CASE("sharding: a ViT with activation checkpointing logs the losses of none at 2 ranks", "[dist][e2e]") {
  if (test::is_worker()) return;
  check_modes("shard_equiv_vit", 2, " --set train.grad_clip=1.0", kShardVitYaml);
}

TEST_CASE("sharding: a channels-last ResNet with activation checkpointing logs the losses of none at 2 ranks",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  check_modes("shard_equiv_resnet", 2, " --set train.grad_clip=1.0", kShardResnetYaml);
}

TEST_CASE("sharding: optimizer, gradients and full log the losses of none at 2 ranks, grad_accum 2 and grad_clip",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  check_modes("shard_equiv_2", 2, " --set train.batch_size=4 --set train.grad_accum=2 --set train.grad_clip=0.5");
}

TEST_CASE("sharding: optimizer, gradients and full log the losses of none at 3 ranks (uneven shards), grad_clip",
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

TEST_CASE("sharding: optimizer, gradients and full under torchrun and mpirun log the losses of trainer launch with none",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  const std::string torchrun = test::venv_bin("torchrun");
  const auto mpi = test::run_shell("command -v mpirun");
  if (!std::filesystem::exists(torchrun) || mpi.exit_code != 0) TRAINER_SKIP("needs torchrun and mpirun");
  const std::string mpirun = mpi.output.substr(0, mpi.output.find('\n'));
  auto dir = test::scratch_dir("shard_launchers");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  auto none = shard_run(dir, cfg, 2, "none", "");
  const std::string args = "run " + cfg + " --set train.max_steps=30";
  auto under_torchrun = [&](const std::string& mode) {
    return test::train_tiny_gpt(torchrun + " --no_python --nproc_per_node 2 --master_addr 127.0.0.1 --master_port " +
                                    std::to_string(dist::free_local_port()),
                                args + " --set dist.sharding=" + mode, dir / ("torchrun_" + mode));
  };
  auto under_mpirun = [&](const std::string& mode) {
    return test::train_tiny_gpt(mpirun + " --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1",
                                args + " --set dist.sharding=" + mode + " --set dist.store=file://" +
                                    (dir / ("rendezvous_" + mode)).string(),
                                dir / ("mpirun_" + mode));
  };
  struct Case {
    std::string what, banner;
    test::TrainRun run;
  };
  const Case cases[] = {{"gradients under torchrun", "ZeRO-2", under_torchrun("gradients")},
                        {"full under torchrun", "ZeRO-3", under_torchrun("full")},
                        {"optimizer under mpirun", "ZeRO-1", under_mpirun("optimizer")},
                        {"full under mpirun", "ZeRO-3", under_mpirun("full")}};
  for (const auto& c : cases) {
    INFO(c.what << "\n" << c.run.output);
    REQUIRE(c.run.exit_code == 0);
    REQUIRE(c.run.losses.size() == kShardSteps);
    CHECK(c.run.world_size == 2);
    CHECK(c.run.output.find(c.banner) != std::string::npos);
    check_same_as_none(none, c.run, c.what);
  }
}


TEST_CASE("sharding: trainer export of a sharded run (gradients, full) writes the whole model, as a replicated run's", "[dist][e2e]") {
  if (test::is_worker()) return;
  auto dir = test::scratch_dir("shard_export");
  auto cfg = test::write_tiny_gpt_config(dir).string();
  std::map<std::string, std::map<std::string, ExportedTensor>> exported;
  for (const std::string mode : {"none", "gradients", "full"}) {
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
  REQUIRE(a.count("lm_head.weight"));  // nanoGPT names, as tests/python/test_export_interop.py loads them
  for (const std::string mode : {"gradients", "full"}) {
    const auto& b = exported[mode];
    REQUIRE(a.size() == b.size());
    for (const auto& [name, t] : a) {
      INFO(mode << ": " << name);
      REQUIRE(b.count(name));
      REQUIRE(b.at(name).shape == t.shape);
      double worst = 0;
      for (size_t i = 0; i < t.values.size(); ++i)
        worst = std::max(worst, static_cast<double>(std::abs(t.values[i] - b.at(name).values[i])));
      CHECK(worst <= 1e-5);  // float rounding of 5 steps
    }
  }
}

TEST_CASE("sharding: kill -9 of a 2-rank sharded run (gradients, full) saving every step never leaves a checkpoint taken as complete",
          "[dist][e2e]") {
  if (test::is_worker()) return;
  const std::string mode = GENERATE(as<std::string>{}, "gradients", "full");  // full: its saves gather the model
  INFO(mode);
  auto dir = test::scratch_dir("shard_kill9_" + mode);
  auto cfg = test::write_tiny_gpt_config(dir).string();
  // a checkpoint after every step: most kills land in a save (staged shards, a temporary folder,
  // the rename); the launcher's ranks die with it (PDEATHSIG)
  const std::string args = "launch -n 2 -- run " + cfg +
                           " --set train.max_steps=100000 --set checkpoint.every_steps=1 --set checkpoint.keep_last=2"
                           " --set dist.sharding=" + mode + " --out-dir " + (dir / "out").string();
  // the newest step with a manifest (0 while there is none, or no checkpoints folder yet)
  const auto ckpts = dir / "out/tiny/checkpoints";
  auto newest_with_manifest = [&] {
    int64_t step = 0;
    std::error_code ec;
    for (fs::directory_iterator it(ckpts, ec), end; !ec && it != end; it.increment(ec)) {
      const auto name = it->path().filename().string();
      if (name.rfind("step-", 0) == 0 && fs::exists(it->path() / "manifest.json"))
        step = std::max<int64_t>(step, std::stoll(name.substr(5)));
    }
    return step;
  };
  // four kills, each once that attempt has saved a checkpoint of its own (the first one: the folder
  // exists), then at a random moment of the next 0.8 s: most land in a save
  std::mt19937 rng(4242);
  std::uniform_int_distribution<int> moment_ms(0, 800);
  std::istringstream words(args);  // no quoting in args: scratch paths have no spaces
  const std::vector<std::string> argv{std::istream_iterator<std::string>(words), {}};
  for (int kill = 0; kill < 4; ++kill) {
    const int64_t before = newest_with_manifest();
    const auto log = dir / ("kill" + std::to_string(kill) + ".log");
    const pid_t pid = test::spawn_trainer(argv, log);
    const bool saved = test::wait_for([&] { return newest_with_manifest() > before; });
    std::this_thread::sleep_for(std::chrono::milliseconds(moment_ms(rng)));  // the moment, not a wait
    ::kill(pid, SIGKILL);
    const int rc = test::wait_pid(pid);
    INFO("kill " << kill << ":\n" << test::read_file(log));
    REQUIRE(saved);
    REQUIRE(rc == 137);  // killed: never a failed start or resume
  }
  // every folder with a manifest holds both shards; the next run resumes from a verified one
  int complete = 0;
  int64_t newest = 0;
  for (const auto& e : fs::directory_iterator(ckpts)) {
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
