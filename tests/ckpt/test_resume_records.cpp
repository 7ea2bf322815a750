// A run stopped or killed at awkward moments, then run again, ends with the uninterrupted run's
// records, best checkpoint and early stop, and its exit code is the run's own: a stop signal's
// checkpoint at an evaluation step (the resumed run evaluates that step first), at the last step (the
// end is made on the rerun), a kill between a step's train and eval records (the eval record is
// written by the resumed run), a kill before the first checkpoint (each step logged once, the
// recomputed losses compared), a signal after the loop ended (exit 0, not 143), a checkpoint between
// two log steps (the interval's first losses come from the checkpoint, one process and two ranks).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt_runs.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using trainer::test::read_file;
using trainer::test::records;
using trainer::test::run_trainer;
using trainer::test::write_file;

namespace {

// eval every 2 steps; no periodic checkpoint unless `every` (the stops' and the end's saves alone)
// (tiny_config's run, with evaluations)
std::string eval_config(const std::string& name, int64_t steps, int64_t every = 0, const std::string& extra = "",
                        const std::string& ckpt_extra = "") {
  return "run: {name: " + name + ", out_dir: runs, seed: 3, deterministic: true}\n"
         "model: {arch: gpt, vocab_size: 64, block_size: 16, n_layer: 2, n_head: 2, n_embd: 32, dropout: 0.1}\n"
         "data: {format: synthetic, workers: 1, synthetic: {num_samples: 96, val_samples: 32}}\n"
         "train: {batch_size: 8, max_steps: " + std::to_string(steps) + ", log_every: 1, threads: 1, eval_every: 2, "
         "eval_steps: 2" + extra + "}\n"
         "optim: {name: adamw, lr: 0.003, weight_decay: 0.1}\n"
         "log: {progress: off}\n"
         "checkpoint: {every_steps: " + std::to_string(every) + ", keep_last: 10" + ckpt_extra + "}\n";
}

// "kind step loss" of every train and eval record, in file order, the loss to the last bit
std::vector<std::string> loss_records(const fs::path& metrics) {
  std::vector<std::string> out;
  std::istringstream in(read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    const std::string kind = j.value("kind", "");
    if (kind == "train" || kind == "eval") {
      char loss[40];
      std::snprintf(loss, sizeof loss, "%a", j.at("loss").get<double>());
      out.push_back(kind + " " + std::to_string(j.at("step").get<int64_t>()) + " " + loss);
    }
  }
  return out;
}

std::string best_link(const fs::path& run) { return fs::read_symlink(run / "checkpoints" / "best").string(); }

std::string summary_stop(const fs::path& run) {
  const auto s = records(run / "metrics.jsonl", "summary");
  return s.empty() ? std::string("(no summary)") : s.back().value("stop_reason", std::string("?"));
}

}  // namespace

TEST_CASE("resume records: a stop signal at an evaluation step, then the same command: the uninterrupted run's "
          "records, best and early stop",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("resume_records_eval_stop");
  // early stopping on the loss with a min_delta no evaluation beats: the evaluation at step 4 stops the run
  const std::string es = ", early_stopping: {metric: loss, patience: 1, min_delta: 100}";
  for (const std::string n : {"ref", "sig", "ref_es", "sig_es"})
    write_file(dir / (n + ".yaml"), eval_config(n, 8, 0, n.size() > 3 ? es : ""));
  auto run = [&](const std::string& n, const std::string& env = "") {
    return run_trainer("run " + (dir / (n + ".yaml")).string(), env);
  };
  for (const std::string n : {"ref", "ref_es"}) REQUIRE(run(n).exit_code == 0);
  for (const std::string n : {"sig", "sig_es"}) {
    INFO(n);
    auto stopped = run(n, "TRAINER_INJECT_SIGNAL=4");
    INFO(stopped.output);
    REQUIRE(stopped.exit_code == 75);
    // saved at the boundary, before step 4's evaluation
    CHECK(records(dir / "runs" / n / "metrics.jsonl", "eval").size() == 1);
    auto again = run(n);
    INFO(again.output);
    REQUIRE(again.exit_code == 0);
    CHECK(again.output.find("eval step 4 |") != std::string::npos);
  }
  CHECK(loss_records(dir / "runs" / "sig" / "metrics.jsonl") == loss_records(dir / "runs" / "ref" / "metrics.jsonl"));
  CHECK(best_link(dir / "runs" / "sig") == best_link(dir / "runs" / "ref"));
  // early stopping counted step 4's evaluation: both end there
  CHECK(loss_records(dir / "runs" / "sig_es" / "metrics.jsonl") ==
        loss_records(dir / "runs" / "ref_es" / "metrics.jsonl"));
  CHECK(summary_stop(dir / "runs" / "ref_es") == "early_stopping");
  CHECK(summary_stop(dir / "runs" / "sig_es") == "early_stopping");
  CHECK(trainer::test::train_losses(dir / "runs" / "sig_es" / "metrics.jsonl").rbegin()->first == 4);
  // an early-stopped run is complete: the same command again trains nothing and writes nothing
  for (const std::string n : {"ref_es", "sig_es"}) {
    const std::string before = read_file(dir / "runs" / n / "metrics.jsonl");
    auto again = run(n);
    INFO(again.output);
    CHECK(again.exit_code == 0);
    CHECK(again.output.find("the run is already complete: early stopping ended it at step 4") != std::string::npos);
    CHECK(read_file(dir / "runs" / n / "metrics.jsonl") == before);
  }
}

TEST_CASE("resume records: a stop signal at the last step, then the same command: the final evaluation and summary "
          "are made",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("resume_records_last_stop");
  write_file(dir / "ref.yaml", eval_config("ref", 5));
  write_file(dir / "sig.yaml", eval_config("sig", 5));
  REQUIRE(run_trainer("run " + (dir / "ref.yaml").string()).exit_code == 0);
  auto stopped = run_trainer("run " + (dir / "sig.yaml").string(), "TRAINER_INJECT_SIGNAL=5");
  INFO(stopped.output);
  REQUIRE(stopped.exit_code == 75);
  CHECK(summary_stop(dir / "runs" / "sig") == "(no summary)");
  auto again = run_trainer("run " + (dir / "sig.yaml").string());
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK(again.output.find("already complete") == std::string::npos);
  CHECK(loss_records(dir / "runs" / "sig" / "metrics.jsonl") == loss_records(dir / "runs" / "ref" / "metrics.jsonl"));
  CHECK(summary_stop(dir / "runs" / "sig") == "max_steps");
  CHECK(best_link(dir / "runs" / "sig") == best_link(dir / "runs" / "ref"));
  // and a third time there is nothing left to do
  auto third = run_trainer("run " + (dir / "sig.yaml").string());
  REQUIRE(third.exit_code == 0);
  CHECK(third.output.find("the run is already complete (5 of 5 steps)") != std::string::npos);
  // train.max_steps lowered below the checkpoint's step: said (it ended "max_steps" at step 5 in silence)
  auto lowered = run_trainer("run " + (dir / "sig.yaml").string() + " --set train.max_steps=3");
  INFO(lowered.output);
  REQUIRE(lowered.exit_code == 0);
  CHECK(lowered.output.find("the checkpoint is at step 5, past train.max_steps 3 (lowered since it was saved?): "
                            "nothing is trained, and the run ends at step 5, not 3") != std::string::npos);
}

TEST_CASE("resume records: killed between a step's train record and its eval record, the resumed run writes the eval "
          "record once",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("resume_records_eval_kill");
  write_file(dir / "ref.yaml", eval_config("ref", 6, 2));
  write_file(dir / "k.yaml", eval_config("k", 6, 2));
  REQUIRE(run_trainer("run " + (dir / "ref.yaml").string()).exit_code == 0);
  // the killed run as it was left: step-2's checkpoint, its records up to step 4's train record
  const auto ref = dir / "runs" / "ref", k = dir / "runs" / "k";
  fs::create_directories(k / "checkpoints");
  fs::copy(ref / "checkpoints" / "step-2", k / "checkpoints" / "step-2", fs::copy_options::recursive);
  fs::copy_file(ref / "config.yaml", k / "config.yaml");
  std::string kept;
  {
    std::istringstream in(read_file(ref / "metrics.jsonl"));
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.value("kind", "") == "eval" && j.value("step", 0) == 4) break;
      if (j.value("kind", "") == "summary") break;
      kept += line + "\n";
    }
  }
  write_file(k / "metrics.jsonl", kept);
  REQUIRE(records(k / "metrics.jsonl", "eval").size() == 1);
  auto resumed = run_trainer("run " + (dir / "k.yaml").string());
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("resumed from") != std::string::npos);
  CHECK(loss_records(k / "metrics.jsonl") == loss_records(ref / "metrics.jsonl"));
}

TEST_CASE("resume records: killed before its first checkpoint, the rerun logs each step once and compares them",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("resume_records_no_ckpt");
  // no checkpoint before the end: no periodic one, and none for the best evaluation
  write_file(dir / "ref.yaml", eval_config("ref", 6, 0, "", ", save_best: false"));
  write_file(dir / "k.yaml", eval_config("k", 6, 0, "", ", save_best: false"));
  REQUIRE(run_trainer("run " + (dir / "ref.yaml").string()).exit_code == 0);
  auto crashed = run_trainer("run " + (dir / "k.yaml").string(), "TRAINER_INJECT_CRASH=3");
  INFO(crashed.output);
  REQUIRE(crashed.exit_code != 0);
  REQUIRE_FALSE(fs::exists(dir / "runs" / "k" / "checkpoints" / "latest"));
  REQUIRE(records(dir / "runs" / "k" / "metrics.jsonl", "train").size() == 3);
  auto again = run_trainer("run " + (dir / "k.yaml").string());
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK(again.output.find("no checkpoint to resume: attempt 2 starts again from step 0") != std::string::npos);
  CHECK(again.output.find("resume check: 3 logged step(s) recomputed, max relative loss difference 0") !=
        std::string::npos);
  CHECK(loss_records(dir / "runs" / "k" / "metrics.jsonl") == loss_records(dir / "runs" / "ref" / "metrics.jsonl"));
}

TEST_CASE("resume records: a stop signal after the training loop ended leaves the exit code the run's own", "[e2e]") {
  auto dir = trainer::test::scratch_dir("resume_records_signal_after");
  write_file(dir / "c.yaml", eval_config("c", 3));
  auto r = run_trainer("run " + (dir / "c.yaml").string(), "TRAINER_INJECT_SIGNAL=end");
  INFO(r.output);
  CHECK(r.exit_code == 0);  // it was killed by the signal (143) while the default handlers were back
  CHECK(r.output.find("SIGTERM received after the run's loop ended; it exits with its own code") != std::string::npos);
  CHECK(summary_stop(dir / "runs" / "c") == "max_steps");
  // the run's own failure code stays too: 2 for a bad injection value is refused at the first boundary
  auto bad = run_trainer("run " + (dir / "c.yaml").string() + " --set run.name=bad", "TRAINER_INJECT_SIGNAL=later");
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find("TRAINER_INJECT_SIGNAL: 'later' is not a step number (0, 1, ...) or end") != std::string::npos);
}

namespace {

// the records of `ref` up to and including the first that `last` accepts (a run killed right after it)
std::string records_until(const fs::path& metrics, const std::function<bool(const nlohmann::json&)>& last) {
  std::string kept;
  std::istringstream in(read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    kept += line + "\n";
    if (last(nlohmann::json::parse(line))) break;
  }
  return kept;
}

std::string every_four(std::string cfg) {
  const auto at = cfg.find("log_every: 1,");
  REQUIRE(at != std::string::npos);
  return cfg.replace(at, 13, "log_every: 4,");
}

}  // namespace

TEST_CASE("resume records: a stop signal between two log steps, then the same command: the interval's record is the "
          "uninterrupted run's",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("resume_records_interval");
  write_file(dir / "ref.yaml", every_four(eval_config("ref", 12)));
  write_file(dir / "sig.yaml", every_four(eval_config("sig", 12)));
  REQUIRE(run_trainer("run " + (dir / "ref.yaml").string()).exit_code == 0);
  auto stopped = run_trainer("run " + (dir / "sig.yaml").string(), "TRAINER_INJECT_SIGNAL=5");
  INFO(stopped.output);
  REQUIRE(stopped.exit_code == 75);
  const auto state = nlohmann::json::parse(read_file(dir / "runs" / "sig" / "checkpoints" / "step-5" / "state.json"));
  CHECK(state.at("log_interval").at("loss_counts") == nlohmann::json::array({1}));  // step 5's loss, one micro-batch
  auto again = run_trainer("run " + (dir / "sig.yaml").string());
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK(trainer::test::train_losses(dir / "runs" / "sig" / "metrics.jsonl").count(8) == 1);
  CHECK(loss_records(dir / "runs" / "sig" / "metrics.jsonl") == loss_records(dir / "runs" / "ref" / "metrics.jsonl"));
}

TEST_CASE("resume records: two ranks killed after a checkpoint between two log steps: the records are the "
          "uninterrupted run's, and the recomputed one is compared",
          "[e2e][dist]") {
  auto dir = trainer::test::scratch_dir("resume_records_interval_dist");
  for (const std::string n : {"ref", "a", "b"}) write_file(dir / (n + ".yaml"), every_four(eval_config(n, 12, 3)));
  auto launch = [&](const std::string& n) { return run_trainer("launch -n 2 -- run " + (dir / (n + ".yaml")).string()); };
  const auto ref = dir / "runs" / "ref";
  REQUIRE(launch("ref").exit_code == 0);
  // a: killed after step 6's checkpoint (after step 6's evaluation), before step 8's record;
  // b: killed after step 8's records, before step 9's checkpoint: step 8 is recomputed and compared
  const auto eval_at = [](int64_t step) {
    return [step](const nlohmann::json& j) { return j.value("kind", "") == "eval" && j.value("step", 0) == step; };
  };
  for (const auto& [n, last] : {std::pair{std::string("a"), int64_t{6}}, std::pair{std::string("b"), int64_t{8}}}) {
    const auto k = dir / "runs" / n;
    fs::create_directories(k / "checkpoints");
    fs::copy(ref / "checkpoints" / "step-6", k / "checkpoints" / "step-6", fs::copy_options::recursive);
    fs::copy_file(ref / "config.yaml", k / "config.yaml");
    write_file(k / "metrics.jsonl", records_until(ref / "metrics.jsonl", eval_at(last)));
    auto resumed = launch(n);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK(resumed.output.find("resumed from") != std::string::npos);
    CHECK(loss_records(k / "metrics.jsonl") == loss_records(ref / "metrics.jsonl"));
    if (n == "b")
      CHECK(resumed.output.find("resume check: 1 logged step(s) recomputed, max relative loss difference 0 ") !=
            std::string::npos);
  }
  const auto state = nlohmann::json::parse(read_file(ref / "checkpoints" / "step-6" / "state.json"));
  CHECK(state.at("log_interval").at("loss_counts") == nlohmann::json::array({2, 2}));  // steps 5 and 6, each rank
}

TEST_CASE("resume records: an epochs-sized run stopped at 2 ranks and resumed on 1 ends after its epochs, counts its "
          "samples over both, and is complete when run again",
          "[e2e][dist]") {
  auto dir = trainer::test::scratch_dir("resume_records_epochs_world");
  std::string cfg = trainer::test::tiny_config("e", 1);  // 96 samples of 8 a batch
  const auto at = cfg.find("max_steps: 1,");
  REQUIRE(at != std::string::npos);
  write_file(dir / "e.yaml", cfg.replace(at, 13, "epochs: 3,"));
  const std::string args = "run " + (dir / "e.yaml").string() + " --out-dir " + (dir / "runs").string();
  auto two = run_trainer("launch -n 2 -- " + args, "TRAINER_INJECT_SIGNAL=5");  // 16 samples a step
  INFO(two.output);
  REQUIRE(two.exit_code == 75);
  auto one = run_trainer(args);  // the 208 samples left at 8 a step
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  CHECK(one.output.find("the global batch changes from 16 to 8 samples per step") != std::string::npos);
  const auto metrics = dir / "runs" / "e" / "metrics.jsonl";
  const auto summary = records(metrics, "summary");
  REQUIRE(summary.size() == 1);
  CHECK(summary[0].at("samples") == 288);  // 3 epochs of 96 (it counted 31 x 8)
  int64_t previous = 0;
  for (const auto& r : records(metrics, "train")) {  // never backwards across the world change
    CHECK(r.at("samples").get<int64_t>() > previous);
    previous = r.at("samples").get<int64_t>();
  }
  CHECK(previous == 288);
  auto again = run_trainer(args);  // it recounted the length at 1 rank from the config's, and trained past
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(again.output.find("the run is already complete (31 of 31 steps)") != std::string::npos);
}

TEST_CASE("resume records: one process with accumulation 2 stopped between two log steps and resumed on 2 ranks logs "
          "the uninterrupted interval's mean",
          "[e2e][dist]") {
  // the saved sums counted micro-batches of accumulation 2; each rank now counts one a step (they were
  // weighed double: 1 % off, and the resume check refused a legitimate resume)
  auto dir = trainer::test::scratch_dir("resume_records_interval_accum");
  for (const std::string n : {"ref", "s"}) {
    std::string cfg = every_four(eval_config(n, 12, 0, ", global_batch_size: 16"));
    write_file(dir / (n + ".yaml"), cfg);
  }
  REQUIRE(run_trainer("run " + (dir / "ref.yaml").string()).exit_code == 0);
  auto stopped = run_trainer("run " + (dir / "s.yaml").string(), "TRAINER_INJECT_SIGNAL=5");
  INFO(stopped.output);
  REQUIRE(stopped.exit_code == 75);
  auto two = run_trainer("launch -n 2 -- run " + (dir / "s.yaml").string());
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  const auto ref = trainer::test::train_losses(dir / "runs" / "ref" / "metrics.jsonl");
  const auto got = trainer::test::train_losses(dir / "runs" / "s" / "metrics.jsonl");
  REQUIRE(got.count(8) == 1);
  CHECK(std::abs(got.at(8) - ref.at(8)) <= 1e-5 * ref.at(8));
}

TEST_CASE("resume records: stopped between two log steps and resumed at the same ranks with another accumulation logs "
          "the uninterrupted interval's mean",
          "[e2e]") {
  // one process, 2 micro-batches of 8 a step, resumed as 1 of 16: the saved sum counted 2 a step, the
  // resumed steps 1 (the sums were added raw: the saved step weighed double; a pipeline's microbatches
  // or a tp <-> pp change at the same ranks did the same, and the resume check then failed a good run)
  auto dir = trainer::test::scratch_dir("resume_records_interval_same_ranks");
  for (const std::string n : {"ref", "s"}) {  // no dropout: its masks are drawn per micro-batch
    std::string cfg = every_four(eval_config(n, 12, 0, ", global_batch_size: 16"));
    const auto at = cfg.find("dropout: 0.1");
    REQUIRE(at != std::string::npos);
    write_file(dir / (n + ".yaml"), cfg.replace(at, 12, "dropout: 0.0"));
  }
  REQUIRE(run_trainer("run " + (dir / "ref.yaml").string()).exit_code == 0);
  auto stopped = run_trainer("run " + (dir / "s.yaml").string(), "TRAINER_INJECT_SIGNAL=5");
  INFO(stopped.output);
  REQUIRE(stopped.exit_code == 75);
  const auto state = nlohmann::json::parse(read_file(dir / "runs" / "s" / "checkpoints" / "step-5" / "state.json"));
  CHECK(state.at("log_interval").at("loss_counts") == nlohmann::json::array({2}));
  CHECK(state.at("log_interval").at("micro_batches_per_step") == nlohmann::json::array({2}));
  auto resumed = run_trainer("run " + (dir / "s.yaml").string() + " --set train.batch_size=16 --resume " +
                             (dir / "runs" / "s" / "checkpoints").string());
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto ref = trainer::test::train_losses(dir / "runs" / "ref" / "metrics.jsonl");
  const auto got = trainer::test::train_losses(dir / "runs" / "s" / "metrics.jsonl");
  REQUIRE(got.count(8) == 1);
  CHECK(std::abs(got.at(8) - ref.at(8)) <= 1e-5 * ref.at(8));
  // and the same accumulation: bit for bit, as before
  auto same = run_trainer("run " + (dir / "ref.yaml").string() + " --resume " +
                          (dir / "runs" / "s" / "checkpoints" / "step-5").string() + " --out-dir " +
                          (dir / "same").string());
  INFO(same.output);
  REQUIRE(same.exit_code == 0);
  CHECK(trainer::test::train_losses(dir / "same" / "ref" / "metrics.jsonl").at(8) == ref.at(8));
}

TEST_CASE("resume records: a BatchNorm model at 2 ranks stopped and resumed evaluates as the uninterrupted run",
          "[e2e][dist]") {
  // each rank's running statistics follow its own slices; the checkpoint keeps rank 0's. Every rank
  // now takes dp rank 0's buffers before an evaluation (as DDP's broadcast_buffers): before, rank 1
  // scored its share with its own statistics uninterrupted and with rank 0's after a resume
  auto dir = trainer::test::scratch_dir("resume_records_bn_dist");
  for (const std::string n : {"ref", "s"})
    write_file(dir / (n + ".yaml"),
               "run: {name: " + n + ", out_dir: runs, seed: 1, deterministic: true}\n"
               "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 1, num_classes: 4}\n"
               "data: {format: synthetic, workers: 1, synthetic: {num_samples: 256, val_samples: 64, image_size: 16}}\n"
               "train: {batch_size: 32, max_steps: 6, log_every: 1, eval_every: 3, threads: 1}\n"
               "optim: {name: sgd, lr: 0.05, momentum: 0.9}\nlog: {progress: off}\ncheckpoint: {every_steps: 0}\n");
  auto launch = [&](const std::string& n, const std::string& env = "") {
    return run_trainer("launch -n 2 -- run " + (dir / (n + ".yaml")).string(), env);
  };
  REQUIRE(launch("ref").exit_code == 0);
  auto stopped = launch("s", "TRAINER_INJECT_SIGNAL=2");
  INFO(stopped.output);
  REQUIRE(stopped.exit_code == 75);
  auto again = launch("s");
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  const auto want = loss_records(dir / "runs" / "ref" / "metrics.jsonl");
  CHECK(want.size() == 8);  // 6 train, 2 eval records
  CHECK(loss_records(dir / "runs" / "s" / "metrics.jsonl") == want);
}
