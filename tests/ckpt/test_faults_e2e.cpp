// Faults through the real binary: kill -9 again and again, non-finite steps (skip / rollback /
// abort), a resume that no longer matches its logged losses, the `best` checkpoint, SLURM requeue.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "ckpt_runs.hpp"
#include "hardening_util.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using trainer::test::run_trainer;
using trainer::test::write_file;
using trainer::test::records;
using trainer::test::tiny_config;
using trainer::test::train_losses;

namespace {

// Every tensor of two safetensors files is bitwise equal, under the same names.
void require_same_tensors(const fs::path& a, const fs::path& b) {
  auto fa = trainer::io::load_safetensors(a.string());
  auto fb = trainer::io::load_safetensors(b.string());
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    INFO(fa.tensors[i].first);
    REQUIRE(fa.tensors[i].first == fb.tensors[i].first);
    CHECK(torch::equal(fa.tensors[i].second, fb.tensors[i].second));
  }
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("kill -9 ten times at random moments: every resume works and the final weights are bitwise those of an "
          "uninterrupted run",
          "[e2e]") {
  auto dir = trainer::test::scratch_dir("kill9_loop");
  // an endless run (constant learning rate: the step count does not shape the schedule), killed ten
  // times at random moments of start-up, training, checkpointing and resuming
  const std::string ckpt = "checkpoint: {every_steps: 2, keep_last: 3}\n";
  write_file(dir / "victim.yaml", tiny_config("victim", 1000000000, ckpt));
  // The moments follow this host's speed: the first run is killed once it saved a checkpoint, and
  // the time that took (start-up, training, a save) is the span the next kills are drawn from; the
  // last one waits for its resume, so at least one kill lands after a resume.
  const auto victim_ckpts = dir / "runs/victim/checkpoints";
  std::mt19937 rng(20261130);
  double span_ms = 0;
  int resumes = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const auto log = dir / ("attempt" + std::to_string(attempt) + ".log");
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = trainer::test::spawn_trainer({"run", (dir / "victim.yaml").string()}, log);
    int ms = 0;
    if (attempt == 0) {
      REQUIRE(trainer::test::wait_for([&] { return fs::exists(victim_ckpts / "latest/manifest.json"); }));
      span_ms = 1.5 * std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    } else if (attempt == 9) {
      REQUIRE(trainer::test::wait_for([&] { return contains(trainer::test::read_file(log), "resumed from "); }));
      ms = std::uniform_int_distribution<int>(0, 500)(rng);
    } else {
      ms = std::uniform_int_distribution<int>(0, static_cast<int>(span_ms))(rng);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));  // the moment of the kill, not a wait
    ::kill(pid, SIGKILL);
    const int rc = trainer::test::wait_pid(pid);
    const auto output = trainer::test::read_file(log);
    const char* after = attempt == 0 ? "the first checkpoint" : attempt == 9 ? "its resume" : "its start";
    INFO("attempt " << attempt << ", killed " << ms << " ms after " << after << ":\n" << output);
    REQUIRE(rc == 137);  // killed: never a failed start or resume
    if (contains(output, "resumed from ")) ++resumes;
  }
  const auto victim = dir / "runs/victim/checkpoints";
  auto scan = trainer::io::CheckpointStore(victim).find_newest_complete();
  REQUIRE(scan.newest);
  const int64_t end = scan.newest->step + 6;  // the last run trains a few more steps, then stops
  auto last = run_trainer("run " + (dir / "victim.yaml").string() + " --set train.max_steps=" + std::to_string(end));
  INFO(last.output);
  REQUIRE(last.exit_code == 0);
  WARN("10 x kill -9 (" << resumes << " of them after a resume); the last run resumed at step " << scan.newest->step
                         << " and stopped at " << end);
  CHECK(resumes >= 1);  // the last kill waited for its resume

  write_file(dir / "ref.yaml", tiny_config("ref", end, ckpt));
  auto ref = run_trainer("run " + (dir / "ref.yaml").string());
  INFO(ref.output);
  REQUIRE(ref.exit_code == 0);
  const auto step_dir = "step-" + std::to_string(end);
  require_same_tensors(dir / "runs/ref/checkpoints" / step_dir / "model.safetensors", victim / step_dir / "model.safetensors");
  require_same_tensors(dir / "runs/ref/checkpoints" / step_dir / "optimizer.safetensors",
                       victim / step_dir / "optimizer.safetensors");
}

TEST_CASE("train.nonfinite skip: a NaN step leaves the weights untouched and the run goes on", "[e2e]") {
  auto dir = trainer::test::scratch_dir("nonfinite_skip");
  write_file(dir / "c.yaml", tiny_config("c", 10, "checkpoint: {every_steps: 1, keep_last: 20}\n"));
  auto r = run_trainer("run " + (dir / "c.yaml").string() + " --set train.nonfinite=skip",
                       "TRAINER_INJECT_NONFINITE_GRAD=5,6");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.output, "non-finite gradients at step 5: step skipped (1 in a row, at most 5)"));
  CHECK(contains(r.output, "non-finite gradients at step 6: step skipped (2 in a row, at most 5)"));
  const auto ck = dir / "runs/c/checkpoints";
  require_same_tensors(ck / "step-4/model.safetensors", ck / "step-6/model.safetensors");
  require_same_tensors(ck / "step-4/optimizer.safetensors", ck / "step-6/optimizer.safetensors");
  auto losses = train_losses(dir / "runs/c/metrics.jsonl");
  CHECK(losses.count(5) == 0);  // an interval of skipped steps has no loss to log
  CHECK(losses.count(6) == 0);
  REQUIRE(losses.count(10) == 1);
  CHECK(std::isfinite(losses.at(10)));
  CHECK(records(dir / "runs/c/metrics.jsonl", "train").back().at("skipped_steps") == 2);
}

TEST_CASE("train.nonfinite skip gives up after max_nonfinite consecutive skips", "[e2e]") {
  auto dir = trainer::test::scratch_dir("nonfinite_skip_limit");
  write_file(dir / "c.yaml", tiny_config("c", 10));
  auto r = run_trainer("run " + (dir / "c.yaml").string() + " --set train.nonfinite=skip --set train.max_nonfinite=2",
                       "TRAINER_INJECT_NONFINITE_GRAD=3,4,5");
  INFO(r.output);
  REQUIRE(r.exit_code == 1);
  CHECK(contains(r.output, "non-finite gradients in 3 consecutive steps up to step 5 (train.max_nonfinite 2): giving up"));
}

TEST_CASE("train.nonfinite rollback reloads the last checkpoint and finishes the run", "[e2e]") {
  auto dir = trainer::test::scratch_dir("nonfinite_rollback");
  write_file(dir / "c.yaml", tiny_config("c", 12, "checkpoint: {every_steps: 4, keep_last: 5}\n"));
  const std::string args = "run " + (dir / "c.yaml").string() + " --set train.nonfinite=rollback --set train.max_nonfinite=2";
  auto r = run_trainer(args, "TRAINER_INJECT_NONFINITE_GRAD=7");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.output, "non-finite gradients at step 7: rolled back to the checkpoint of step 4"));
  CHECK(fs::exists(dir / "runs/c/checkpoints/step-12/manifest.json"));
  CHECK(std::isfinite(train_losses(dir / "runs/c/metrics.jsonl").at(12)));

  // the same step diverging every time it is redone: bounded
  auto again = run_trainer(args + " --resume never --force",
                           "TRAINER_INJECT_NONFINITE_GRAD=7,7,7");
  INFO(again.output);
  REQUIRE(again.exit_code == 1);
  CHECK(contains(again.output, "non-finite gradients again after 2 rollbacks to step 4 (train.max_nonfinite 2)"));
}

TEST_CASE("train.nonfinite rollback after a stop and resume lands where the uninterrupted run does", "[e2e]") {
  auto dir = trainer::test::scratch_dir("nonfinite_rollback_resumed");
  const std::string cfg = tiny_config("c", 12, "checkpoint: {every_steps: 4, keep_last: 5}\n");
  write_file(dir / "a/c.yaml", cfg);
  write_file(dir / "b/c.yaml", cfg);
  const std::string rollback = " --set train.nonfinite=rollback";
  auto whole = run_trainer("run " + (dir / "a/c.yaml").string() + rollback, "TRAINER_INJECT_NONFINITE_GRAD=7");
  INFO(whole.output);
  REQUIRE(whole.exit_code == 0);
  CHECK(contains(whole.output, "non-finite gradients at step 7: rolled back to the checkpoint of step 4"));
  // stopped at step 5 (a checkpoint of the stop), resumed: that checkpoint was the rollback's target
  // (found from outside), and the losses from step 7 on differed from the uninterrupted run's
  const std::string b = "run " + (dir / "b/c.yaml").string() + rollback;
  REQUIRE(run_trainer(b, "TRAINER_INJECT_SIGNAL=5").exit_code == 75);
  auto resumed = run_trainer(b, "TRAINER_INJECT_NONFINITE_GRAD=7");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(contains(resumed.output, "non-finite gradients at step 7: rolled back to the checkpoint of step 4"));
  const auto ref = train_losses(dir / "a/runs/c/metrics.jsonl"), got = train_losses(dir / "b/runs/c/metrics.jsonl");
  for (int64_t step = 8; step <= 12; ++step) {
    INFO("step " << step);
    REQUIRE(got.count(step) == 1);
    CHECK(got.at(step) == ref.at(step));  // bit for bit (deterministic CPU run)
  }
}

TEST_CASE("train.nonfinite rollback without a checkpoint says so", "[e2e]") {
  auto dir = trainer::test::scratch_dir("nonfinite_rollback_none");
  write_file(dir / "c.yaml", tiny_config("c", 6, ""));
  auto r = run_trainer("run " + (dir / "c.yaml").string() + " --set train.nonfinite=rollback",
                       "TRAINER_INJECT_NONFINITE_GRAD=2");
  INFO(r.output);
  REQUIRE(r.exit_code == 1);
  CHECK(contains(r.output, "non-finite gradients at step 2 and no checkpoint to roll back to"));
}

TEST_CASE("weights holding NaN are never saved, the previous checkpoint stays valid", "[e2e]") {
  auto dir = trainer::test::scratch_dir("nonfinite_never_saved");
  // default train.nonfinite abort checks on log steps; the save at step 4 comes first
  write_file(dir / "c.yaml", tiny_config("c", 10, "checkpoint: {every_steps: 2}\n"));
  auto r = run_trainer("run " + (dir / "c.yaml").string() + " --set train.log_every=10", "TRAINER_INJECT_NONFINITE_GRAD=3");
  INFO(r.output);
  REQUIRE(r.exit_code == 1);
  CHECK(contains(r.output, "refusing to save a checkpoint at step 4: parameter '"));
  CHECK(contains(r.output, "' holds inf/NaN values (the previous checkpoints are kept)"));
  const auto ck = dir / "runs/c/checkpoints";
  CHECK_FALSE(fs::exists(ck / "step-4"));
  CHECK_NOTHROW(trainer::io::verify_checkpoint(ck / "step-2"));
}

TEST_CASE("train.nonfinite abort stops at the log step with the loss it saw", "[e2e]") {
  auto dir = trainer::test::scratch_dir("nonfinite_abort");
  write_file(dir / "c.yaml", tiny_config("c", 10));
  auto r = run_trainer("run " + (dir / "c.yaml").string(), "TRAINER_INJECT_NONFINITE_GRAD=3");
  INFO(r.output);
  REQUIRE(r.exit_code == 1);
  // step 3's update made the weights NaN; step 4's loss shows it
  CHECK(contains(r.output, "training loss is nan in the steps up to 4; train.nonfinite: abort stops here"));
}

TEST_CASE("a resume recomputes the steps the interrupted run had logged and stops when they drift", "[e2e]") {
  auto dir = trainer::test::scratch_dir("resume_verify");
  write_file(dir / "c.yaml", tiny_config("c", 12, "checkpoint: {every_steps: 4, keep_last: 5}\n"));
  REQUIRE(run_trainer("run " + (dir / "c.yaml").string()).exit_code == 0);
  const auto run = dir / "runs/c";
  // as if the run had been killed after logging step 12 but before its last checkpoint was complete
  fs::remove_all(run / "checkpoints/step-12");
  fs::remove(run / "checkpoints/latest");  // it pointed at step-12 (resume does not read it anyway)
  fs::copy(run, dir / "changed", fs::copy_options::recursive | fs::copy_options::copy_symlinks);

  auto same = run_trainer("run " + (dir / "c.yaml").string());
  INFO(same.output);
  REQUIRE(same.exit_code == 0);
  CHECK(contains(same.output, "resume check: the interrupted run logged 4 step(s) after step 8"));
  CHECK(contains(same.output, "resume check: 4 logged step(s) recomputed, max relative loss difference 0 "));

  // the same command over other data: the recomputed step 9 no longer matches what was logged (a run
  // directory of another config resumes only when asked to: --resume its checkpoints). Other samples
  // move this tiny run's loss by about 1 %, the default tolerance's edge, so the check is asked for at
  // 0.1 % (the unchanged resume above recomputed 0 difference).
  fs::remove_all(run);
  fs::rename(dir / "changed", run);
  const std::string asked = " --resume " + (run / "checkpoints").string();
  auto changed = run_trainer("run " + (dir / "c.yaml").string() +
                             " --set data.synthetic.num_samples=80 --set checkpoint.verify_tolerance=0.001" + asked);
  INFO(changed.output);
  REQUIRE(changed.exit_code == 1);
  CHECK(contains(changed.output, "resume check: the loss at step 9 is "));
  CHECK(contains(changed.output, "the data, the code or the config changed since the checkpoint"));
  auto accepted = run_trainer("run " + (dir / "c.yaml").string() +
                              " --set data.synthetic.num_samples=80 --set checkpoint.verify_tolerance=0" + asked);
  INFO(accepted.output);
  CHECK(accepted.exit_code == 0);
}

TEST_CASE("checkpoint.save_best keeps the best evaluated checkpoint through pruning", "[e2e]") {
  auto dir = trainer::test::scratch_dir("save_best");
  write_file(dir / "c.yaml", tiny_config("c", 12, "checkpoint: {keep_last: 1}\n"));
  auto r = run_trainer("run " + (dir / "c.yaml").string() + " --set train.eval_every=3");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto evals = records(dir / "runs/c/metrics.jsonl", "eval");
  REQUIRE(evals.size() == 4);  // steps 3, 6, 9, 12
  const int64_t best = evals.back().at("best_step").get<int64_t>();
  const auto ck = dir / "runs/c/checkpoints";
  REQUIRE(fs::is_symlink(ck / "best"));
  CHECK(fs::read_symlink(ck / "best") == fs::path("step-" + std::to_string(best)));
  CHECK_NOTHROW(trainer::io::verify_checkpoint(ck / ("step-" + std::to_string(best))));
  // keep_last 1: the newest and the best, nothing else
  std::set<std::string> kept;
  for (const auto& e : fs::directory_iterator(ck))
    if (e.path().filename().string().rfind("step-", 0) == 0) kept.insert(e.path().filename().string());
  std::set<std::string> expected = {"step-12", "step-" + std::to_string(best)};
  CHECK(kept == expected);
}

TEST_CASE("checkpoint.requeue runs scontrol requeue for the job (array task included) after a stop signal", "[e2e]") {
  auto dir = trainer::test::scratch_dir("requeue");
  fs::create_directories(dir / "bin");
  // a stand-in scontrol that records its arguments
  write_file(dir / "bin/scontrol", "#!/bin/sh\necho \"$@\" >> " + (dir / "scontrol.log").string() + "\n");
  ::chmod((dir / "bin/scontrol").c_str(), 0755);
  write_file(dir / "c.yaml", tiny_config("c", 1000000, "checkpoint: {requeue: true}\n"));
  const std::string path = "PATH=" + (dir / "bin").string() + ":$PATH ";
  auto plain = run_trainer("run " + (dir / "c.yaml").string(),
                           path + "SLURM_JOB_ID=4242 timeout --preserve-status -s TERM 10");
  INFO(plain.output);
  REQUIRE(plain.exit_code == 75);
  CHECK(contains(plain.output, "scontrol requeue 4242: the job is queued again"));
  auto array = run_trainer("run " + (dir / "c.yaml").string(),
                           path + "SLURM_JOB_ID=4243 SLURM_ARRAY_JOB_ID=100 SLURM_ARRAY_TASK_ID=7 "
                                  "timeout --preserve-status -s TERM 10");
  INFO(array.output);
  REQUIRE(array.exit_code == 75);
  CHECK(trainer::test::read_file(dir / "scontrol.log") == "requeue 4242\nrequeue 100_7\n");
}

TEST_CASE("SIGTERM during checkpoint saves: the save completes, one more is written, exit 75, all verify", "[e2e]") {
  auto dir = trainer::test::scratch_dir("sigterm_in_save");
  // a model whose 40 MB of checkpoint (weights + AdamW moments, fsynced) take far longer to save
  // than its tiny step computes, saved every step: the signals land inside saves
  write_file(dir / "c.yaml",
             "run: {name: c, out_dir: runs, seed: 1}\n"
             "model: {arch: gpt, vocab_size: 64, block_size: 8, n_layer: 4, n_head: 4, n_embd: 256}\n"
             "data: {format: synthetic, workers: 1, synthetic: {num_samples: 64, val_samples: 8}}\n"
             "train: {batch_size: 2, max_steps: 1000000, log_every: 1, threads: 1}\n"
             "optim: {name: adamw, lr: 0.001}\n"
             "checkpoint: {every_steps: 1, keep_last: 2}\n"
             "log: {progress: off}\n");
  // five SIGTERMs 20 ms apart (the moments: some land in a save) once two checkpoints are complete
  const auto ck = dir / "runs/c/checkpoints";
  auto complete = [&] {
    int n = 0;
    std::error_code ec;
    for (fs::directory_iterator it(ck, ec), end; !ec && it != end; it.increment(ec))
      n += it->path().filename().string().rfind("step-", 0) == 0 && fs::exists(it->path() / "manifest.json");
    return n;
  };
  trainer::test::start_trainer("run " + (dir / "c.yaml").string(), dir / "a.log", dir / "a.rc");
  REQUIRE(trainer::test::wait_for([&] { return complete() >= 2; }));
  const pid_t pid = trainer::test::lock_holder(dir / "runs/c/.lock");
  REQUIRE(pid > 0);
  for (int i = 0; i < 5; ++i) {
    ::kill(pid, SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int rc = trainer::test::wait_rc(dir / "a.rc");
  const auto output = trainer::test::read_file(dir / "a.log");
  INFO(output);
  REQUIRE(rc == 75);
  CHECK(contains(output, "SIGTERM received: saving a checkpoint at step "));
  CHECK_FALSE(contains(output, "failed"));
  int verified = 0;
  for (const auto& e : fs::directory_iterator(ck)) {
    const auto name = e.path().filename().string();
    INFO(name);
    CHECK(name.find(".tmp-") == std::string::npos);  // no temporary folder left behind
    if (name.rfind("step-", 0) == 0) {
      CHECK_NOTHROW(trainer::io::verify_checkpoint(e.path()));
      ++verified;
    }
  }
  CHECK(verified == 2);  // keep_last 2
  auto more = run_trainer("run " + (dir / "c.yaml").string() + " --set train.max_steps=" +
                          std::to_string(train_losses(dir / "runs/c/metrics.jsonl").rbegin()->first + 2));
  INFO(more.output);
  CHECK(more.exit_code == 0);
}
