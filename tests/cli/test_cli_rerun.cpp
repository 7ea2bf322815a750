// A run directory as a user's loop meets it: its config.yaml runs again as it is; a config that changes
// training (a sweep point written as `--set optim.lr=X` over a finished run of another lr) is refused,
// naming the keys, with the folder's config.yaml untouched; keys a resume may change go on.
#include <catch2/catch.hpp>

#include <filesystem>

#include "test_util.hpp"

using trainer::test::read_file;
using trainer::test::run_trainer;
namespace fs = std::filesystem;

namespace {
// A tiny ResNet on synthetic images sized in epochs, with a warmup longer than a short run.
std::string rerun_config(const fs::path& dir) {
  const auto file = dir / "exp.yaml";
  trainer::test::write_file(file, "run: {name: sweep, out_dir: runs, seed: 1}\n"
                                  "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 1, num_classes: 4}\n"
                                  "data: {format: synthetic, workers: 1, synthetic: {num_samples: 64, val_samples: 16, "
                                  "image_size: 8}}\n"
                                  "train: {batch_size: 16, epochs: 2, log_every: 1, threads: 1, precision: fp32}\n"
                                  "optim: {name: sgd, lr: 0.1}\nschedule: {name: linear, warmup_steps: 50}\n"
                                  "log: {progress: off}\ncheckpoint: {every_steps: 0}\n");
  return file.string();
}
}  // namespace

TEST_CASE("train.max_steps set by --set over a config sized in epochs runs that many steps, the warmup clipped", "[e2e]") {
  auto dir = trainer::test::scratch_dir("rerun_steps");
  const auto cfg = rerun_config(dir);
  auto r = run_trainer("run " + cfg + " --set train.max_steps=3");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("train.max_steps: sizes the run (3 steps): train.epochs 2 (") != std::string::npos);
  CHECK(r.output.find("schedule.warmup_steps: 50 is longer than the run (3 steps): the schedule clips it to 3") !=
        std::string::npos);
  CHECK(r.output.find(" 3 steps of 16 samples") != std::string::npos);
  // the warmup ends with the run: lr 0.1 x 1/3, 2/3, then the peak at the last step
  CHECK(r.output.find("step 1/3 | epoch 0.25 | loss") != std::string::npos);
  CHECK(r.output.find("| lr 3.33e-02 |") != std::string::npos);
  CHECK(r.output.find("| lr 1.00e-01 |") != std::string::npos);
  const auto saved = read_file(dir / "runs/sweep/config.yaml");
  CHECK(saved.find("\n  max_steps: 3\n  epochs: 0.0\n") != std::string::npos);
  CHECK(saved.find("\n  warmup_steps: 50\n") != std::string::npos);  // as written
}

TEST_CASE("a run directory's config.yaml runs again as it is: no config error, the same run", "[e2e]") {
  auto dir = trainer::test::scratch_dir("rerun_saved");
  const auto cfg = rerun_config(dir);
  auto first = run_trainer("run " + cfg + " --set train.max_steps=2");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const auto saved = dir / "runs/sweep/config.yaml";
  const std::string before = read_file(saved), hash = read_file(dir / "runs/sweep/config.sha256");
  auto again = run_trainer("run " + saved.string());
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(again.output.find("config error") == std::string::npos);
  CHECK(again.output.find("the run is already complete (2 of 2 steps)") != std::string::npos);
  CHECK(read_file(saved) == before);
  CHECK(read_file(dir / "runs/sweep/config.sha256") == hash);  // the same config, the same hash
  auto check = run_trainer("check " + saved.string());
  INFO(check.output);
  CHECK(check.exit_code == 0);
  CHECK(check.output.find("ok (hash " + hash.substr(0, 12) + ")") != std::string::npos);
}

TEST_CASE("a run directory trained with another config is refused, naming the keys, its config.yaml kept",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("rerun_sweep");
  const auto cfg = rerun_config(dir);
  const std::string steps = " --set train.max_steps=2";
  auto first = run_trainer("run " + cfg + steps);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const auto saved = dir / "runs/sweep/config.yaml";
  const std::string before = read_file(saved);
  const auto metrics_before = read_file(dir / "runs/sweep/metrics.jsonl");

  // the sweep's next point: another lr and another batch over the finished run
  auto other = run_trainer("run " + cfg + steps + " --set optim.lr=0.05 --set train.batch_size=8");
  INFO(other.output);
  CHECK(other.exit_code == 2);
  CHECK(other.output.find("holds a run trained with another config (" + saved.string() +
                          "): train.batch_size 16 -> 8, train.global_batch_size 16 -> 8, optim.lr 0.1 -> 0.05. "
                          "Nothing was started and its config.yaml is kept.") != std::string::npos);
  CHECK(other.output.find("--set run.name=NAME or --out-dir DIR") != std::string::npos);
  CHECK(other.output.find("--resume never --force") != std::string::npos);
  CHECK(read_file(saved) == before);
  CHECK(read_file(dir / "runs/sweep/metrics.jsonl") == metrics_before);

  // keys a resume may change go on: a longer run, another log level, more threads
  auto longer = run_trainer("run " + cfg + " --set train.max_steps=3 --set log.level=debug --set train.threads=2");
  INFO(longer.output);
  CHECK(longer.exit_code == 0);
  CHECK(longer.output.find("resum") != std::string::npos);

  // the ways on: a run of its own, or starting over on purpose
  auto named = run_trainer("run " + cfg + steps + " --set optim.lr=0.05 --set run.name=lr0.05");
  INFO(named.output);
  CHECK(named.exit_code == 0);
  CHECK(fs::exists(dir / "runs/lr0.05/checkpoints"));
  auto over = run_trainer("run " + cfg + steps + " --set optim.lr=0.05 --resume never --force");
  INFO(over.output);
  CHECK(over.exit_code == 0);
  CHECK(over.output.find("was trained with another config: optim.lr 0.1 -> 0.05; starting over") != std::string::npos);
}

TEST_CASE("a run directory whose config.yaml was deleted is judged by its newest checkpoint's config", "[e2e]") {
  auto dir = trainer::test::scratch_dir("rerun_no_yaml");
  const auto cfg = rerun_config(dir);
  const std::string steps = " --set train.max_steps=2 --set checkpoint.every_steps=1";
  auto first = run_trainer("run " + cfg + steps);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  REQUIRE(fs::remove(dir / "runs/sweep/config.yaml"));
  const auto metrics_before = read_file(dir / "runs/sweep/metrics.jsonl");

  auto other = run_trainer("run " + cfg + steps + " --set optim.lr=0.05");
  INFO(other.output);
  CHECK(other.exit_code == 2);
  CHECK(other.output.find("holds a run trained with another config (" +
                          (dir / "runs/sweep/checkpoints/step-2/state.json").string() +
                          " (config_yaml; config.yaml is missing)): optim.lr 0.1 -> 0.05. Nothing was started and "
                          "nothing there was changed.") != std::string::npos);
  CHECK(read_file(dir / "runs/sweep/metrics.jsonl") == metrics_before);
  CHECK_FALSE(fs::exists(dir / "runs/sweep/config.yaml"));

  // the same config goes on (a longer run resumes from step 2) and writes its config.yaml again
  auto longer = run_trainer("run " + cfg + " --set train.max_steps=3 --set checkpoint.every_steps=1");
  INFO(longer.output);
  CHECK(longer.exit_code == 0);
  CHECK(longer.output.find("resum") != std::string::npos);
  CHECK(fs::exists(dir / "runs/sweep/config.yaml"));

  // the checkpoint's config holds what the start resolved (train.precision auto -> fp32, batch_size
  // auto -> a micro-batch): the same config, auto, is not a change (it was refused: "fp32" -> "auto")
  const std::string autos = " --set train.precision=auto --set train.batch_size=auto --set train.global_batch_size=16 "
                            "--set run.name=autos --set checkpoint.every_steps=1";
  auto a = run_trainer("run " + cfg + autos + " --set train.max_steps=2");
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  REQUIRE(fs::remove(dir / "runs/autos/config.yaml"));
  auto a2 = run_trainer("run " + cfg + autos + " --set train.max_steps=3");
  INFO(a2.output);
  CHECK(a2.exit_code == 0);
  CHECK(a2.output.find("resum") != std::string::npos);

  // a checkpoint.dir shared with another run: that run's checkpoint is not this run's config; the
  // start refuses the folder, naming both runs (exit 1)
  const std::string shared = " --set checkpoint.dir=" + (dir / "shared").string() + " --set train.max_steps=2";
  REQUIRE(run_trainer("run " + cfg + shared + " --set run.name=first").exit_code == 0);
  auto second = run_trainer("run " + cfg + shared + " --set run.name=second --set train.precision=auto");
  INFO(second.output);
  CHECK(second.exit_code == 1);
  CHECK(second.output.find("holds the checkpoints of another run") != std::string::npos);
}
