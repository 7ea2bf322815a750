// Nothing a user ran is lost silently (hardening): the run-directory lock, saves that fail, a resume
// that finds checkpoints but none it can use, pruning that never deletes what it could not verify.
#include <catch2/catch.hpp>

#include <functional>

#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt_runs.hpp"
#include "ckpt_test_util.hpp"
#include "hardening_util.hpp"
#include "io/checkpoint.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace trainer::test;
namespace io = trainer::io;

namespace {

bool has(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

// Each train record's step, in file order.
std::vector<int64_t> train_steps(const fs::path& metrics) {
  std::vector<int64_t> out;
  for (const auto& j : records(metrics, "train")) out.push_back(j.at("step").get<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("run lock: a second run on the same run directory is refused naming the holder, the first is untouched",
          "[e2e]") {
  auto dir = scratch_dir("lock_second_run");
  write_file(dir / "c.yaml", tiny_config("c", 1000000, "checkpoint: {every_steps: 50}\n"));
  const fs::path run = dir / "runs/c";
  start_trainer("run " + (dir / "c.yaml").string(), dir / "a.log", dir / "a.rc");
  REQUIRE(wait_for([&] { return fs::exists(run / "metrics.jsonl") && !records(run / "metrics.jsonl", "train").empty(); }));
  const pid_t holder = lock_holder(run / ".lock");
  REQUIRE(holder > 0);

  auto second = run_trainer("run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(second.output);
  CHECK(second.exit_code == 1);
  CHECK(has(second.output, "run directory " + run.string() + " is in use by another trainer run (pid " +
                               std::to_string(holder) + " on host "));
  CHECK(has(second.output, "choose another run.name"));
  // the refused run wrote nothing: no second attempt in the metrics, the config is the first run's
  CHECK(records(run / "metrics.jsonl", "attempt").size() == 1);

  REQUIRE(::kill(holder, SIGTERM) == 0);
  CHECK(wait_rc(dir / "a.rc") == 75);
  const auto steps = train_steps(run / "metrics.jsonl");
  CHECK(std::set<int64_t>(steps.begin(), steps.end()).size() == steps.size());  // every step once
}

TEST_CASE("run lock: a lock file left by a killed run is taken over, and says so", "[e2e]") {
  auto dir = scratch_dir("lock_stale");
  write_file(dir / "c.yaml", tiny_config("c", 4));
  // as a run killed with -9 leaves it: the file names its holder, but nobody holds the lock
  write_file(dir / "runs/c/.lock", "pid 4194303 on host elsewhere since 2026-11-30T10:00:00Z\n");
  auto r = run_trainer("run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.output, "took over a stale lock of pid 4194303 on host elsewhere since 2026-11-30T10:00:00Z"));
  CHECK(read_file(dir / "runs/c/.lock").empty());  // released at the end
}

TEST_CASE("run lock: two ranks of two jobs on one run directory: the second job's ranks are refused", "[e2e][dist]") {
  auto dir = scratch_dir("lock_launch");
  write_file(dir / "c.yaml", tiny_config("c", 1000000, "checkpoint: {every_steps: 50}\n"));
  const fs::path run = dir / "runs/c";
  start_trainer("launch -n 2 -- run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string(),
                dir / "a.log", dir / "a.rc");
  REQUIRE(wait_for([&] { return fs::exists(run / "metrics.jsonl") && !records(run / "metrics.jsonl", "train").empty(); }));
  auto second = run_trainer("launch -n 2 -- run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(second.output);
  CHECK(second.exit_code != 0);
  CHECK(has(second.output, "is in use by another trainer run (pid "));
  REQUIRE(::kill(lock_holder(run / ".lock"), SIGTERM) == 0);
  CHECK(wait_rc(dir / "a.rc") == 75);
}

TEST_CASE("failed saves: warn tolerates checkpoint.max_failures in a row, then the run stops with exit 74", "[e2e]") {
  auto dir = scratch_dir("save_failures");
  TmpfsMount full(dir / "full", "64k");  // a checkpoint of the tiny model needs ~400 KB
  REQUIRE(full.mounted());  // needs root (CI and the development machines run as root)
  const std::string ckpt = "checkpoint: {every_steps: 2, dir: " + (dir / "full").string() + "}\n";
  write_file(dir / "c.yaml", tiny_config("c", 20, ckpt));
  const std::string cfg = (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string();

  auto warn = run_trainer("run " + cfg + " --resume never");
  INFO(warn.output);
  CHECK(warn.exit_code == 74);
  CHECK(has(warn.output, "the checkpoint at step 2 could not be saved; training continues (1 failed in a row"));
  CHECK(has(warn.output, "the checkpoint at step 8 could not be saved: "));
  CHECK(has(warn.output, "that is 4 failed saves in a row (checkpoint.max_failures 3)"));
  CHECK(records(dir / "runs/c/metrics.jsonl", "summary").empty());  // the run did not end "done"

  // every periodic failure tolerated: the final save is never optional
  auto last = run_trainer("run " + cfg + " --resume never --set checkpoint.max_failures=100");
  INFO(last.output);
  CHECK(last.exit_code == 74);
  CHECK(has(last.output, "the final checkpoint at step 20 could not be saved: "));
  CHECK(has(last.output, "No space left on device"));

  // the best evaluation of a step whose periodic save just failed does not count a second failure
  // (it did: "2 failed saves in a row" at the first failed step under max_failures 1)
  std::string with_eval = tiny_config("e", 20, "checkpoint: {every_steps: 2, max_failures: 1, dir: " +
                                                   (dir / "full").string() + "}\n");
  const auto at = with_eval.find("log_every: 1, ");
  REQUIRE(at != std::string::npos);
  write_file(dir / "e.yaml", with_eval.insert(at, "eval_every: 2, eval_steps: 1, "));
  auto best = run_trainer("run " + (dir / "e.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(best.output);
  CHECK(best.exit_code == 74);
  CHECK(has(best.output, "the checkpoint at step 2 could not be saved; training continues (1 failed in a row"));
  CHECK(has(best.output, "the checkpoint at step 4 could not be saved: "));
  CHECK(has(best.output, "that is 2 failed saves in a row (checkpoint.max_failures 1)"));
  CHECK_FALSE(has(best.output, "(2 failed in a row"));

  auto abort = run_trainer("run " + cfg + " --resume never --set checkpoint.on_error=abort");
  INFO(abort.output);
  CHECK(abort.exit_code == 74);
  CHECK(has(abort.output, "the checkpoint at step 2 could not be saved (checkpoint.on_error: abort)"));
}

TEST_CASE("failed saves: a stop signal whose checkpoint cannot be saved exits 74, not 75", "[e2e]") {
  auto dir = scratch_dir("signal_save_fails");
  TmpfsMount full(dir / "full", "64k");
  REQUIRE(full.mounted());
  write_file(dir / "c.yaml", tiny_config("c", 1000000, "checkpoint: {dir: " + (dir / "full").string() + "}\n"));
  start_trainer("run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string(), dir / "a.log", dir / "a.rc");
  const fs::path metrics = dir / "runs/c/metrics.jsonl";
  REQUIRE(wait_for([&] { return fs::exists(metrics) && !records(metrics, "train").empty(); }));
  REQUIRE(::kill(lock_holder(dir / "runs/c/.lock"), SIGTERM) == 0);
  CHECK(wait_rc(dir / "a.rc") == 74);
  const auto log = read_file(dir / "a.log");
  INFO(log);
  CHECK(has(log, "the checkpoint the stop signal asked for at step "));
}

TEST_CASE("resume auto: checkpoints that exist but none verifies stop the run, listing them, nothing is deleted",
          "[e2e]") {
  auto dir = scratch_dir("resume_none_verifies");
  write_file(dir / "c.yaml", tiny_config("c", 8, "checkpoint: {every_steps: 4, keep_last: 5}\n"));
  const std::string cfg = (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string();
  REQUIRE(run_trainer("run " + cfg).exit_code == 0);
  const fs::path ck = dir / "runs/c/checkpoints";
  // a newer format version in one, a damaged weight file in the other
  auto m = read_json(ck / "step-8/manifest.json");
  m["version"] = 99;
  write_file(ck / "step-8/manifest.json", m.dump(1));
  flip_byte(ck / "step-4/model.safetensors", 100);
  const std::string m8 = read_file(ck / "step-8/manifest.json"), w4 = read_file(ck / "step-4/model.safetensors");

  auto r = run_trainer("run " + cfg + " --set train.max_steps=12");
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(has(r.output, "--resume auto: " + ck.string() + " holds 2 checkpoint folder(s), but none can be resumed from:"));
  CHECK(has(r.output, (ck / "step-8/manifest.json").string() + ": unsupported checkpoint format version 99"));
  CHECK(has(r.output, (ck / "step-4/model.safetensors").string() + ": checksum mismatch"));
  CHECK(has(r.output, "Nothing was deleted"));
  CHECK(read_file(ck / "step-8/manifest.json") == m8);
  CHECK(read_file(ck / "step-4/model.safetensors") == w4);

  // starting over on purpose: the earlier run's folders, those that do not verify too, are moved aside
  // with its records, never deleted
  auto fresh = run_trainer("run " + cfg + " --resume never --force");
  INFO(fresh.output);
  CHECK(fresh.exit_code == 0);
  int aside = 0;
  for (const auto& e : fs::directory_iterator(ck.parent_path()))
    if (e.path().filename().string().rfind("superseded-", 0) == 0) {
      CHECK(read_file(e.path() / "checkpoints/step-8/manifest.json") == m8);
      CHECK(read_file(e.path() / "checkpoints/step-4/model.safetensors") == w4);
      ++aside;
    }
  CHECK(aside == 1);
}

TEST_CASE("resume auto: a newest checkpoint that lacks a part or is not its folder's step falls back to an older one",
          "[e2e]") {
  auto dir = scratch_dir("resume_fallback");
  write_file(dir / "c.yaml", tiny_config("c", 12, "checkpoint: {every_steps: 4, keep_last: 5}\n"));
  const std::string cfg = (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string();
  REQUIRE(run_trainer("run " + cfg).exit_code == 0);
  const fs::path ck = dir / "runs/c/checkpoints";
  // step-12: no optimizer state (and a manifest that agrees); step-8: state.json says another step
  fs::remove(ck / "step-12/optimizer.safetensors");
  auto m = read_json(ck / "step-12/manifest.json");
  m["files"].erase("optimizer.safetensors");
  write_file(ck / "step-12/manifest.json", m.dump(1));
  resign_manifest(ck / "step-12");
  auto st = read_json(ck / "step-8/state.json");
  st["step"] = 7;
  write_file(ck / "step-8/state.json", st.dump(1));
  resign_manifest(ck / "step-8");

  auto r = run_trainer("run " + cfg + " --set train.max_steps=14");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.output, (ck / "step-12").string() + ": no optimizer.safetensors in this checkpoint"));
  CHECK(has(r.output, (ck / "step-8/state.json").string() + ": says step 7, but the folder is step-8"));
  CHECK(has(r.output, "resumed from " + (ck / "step-4").string() + " at step 4"));
}

// Values no run saves, in a re-signed state.json: each refused naming the file, an older checkpoint
// resumed instead (an evaluated step past the checkpoint's skipped the final evaluation, exit 0; a
// negative loss scale and a negative clock were taken as they were).
TEST_CASE("resume auto: state.json values no run saves are refused, and an older checkpoint is resumed", "[e2e]") {
  auto dir = scratch_dir("resume_hostile_state");
  write_file(dir / "c.yaml", tiny_config("c", 12, "checkpoint: {every_steps: 2, keep_last: 10}\n"));
  const std::string cfg = (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string();
  REQUIRE(run_trainer("run " + cfg).exit_code == 0);
  const fs::path ck = dir / "runs/c/checkpoints";
  const std::vector<std::pair<int, std::function<void(nlohmann::json&)>>> edits = {
      {12, [](nlohmann::json& s) { s["best"]["evaluated_step"] = 1000000000000LL; }},
      {10, [](nlohmann::json& s) { s["loss_scaler"]["scale"] = -1.0; }},
      {8, [](nlohmann::json& s) { s["time_s"] = -1e300; }},
      {6, [](nlohmann::json& s) { s["best"]["step"] = 7; }}};
  for (const auto& [step, edit] : edits) {
    const auto folder = ck / ("step-" + std::to_string(step));
    auto st = read_json(folder / "state.json");
    edit(st);
    write_file(folder / "state.json", st.dump(1));
    resign_manifest(folder);
  }
  auto r = run_trainer("run " + cfg + " --set train.max_steps=14");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.output, (ck / "step-12/state.json").string() + ": best.step and best.evaluated_step must be at most"));
  CHECK(has(r.output, (ck / "step-10/state.json").string() + ": loss_scaler.scale must be a positive finite number"));
  CHECK(has(r.output, (ck / "step-8/state.json").string() + ": time_s must be a finite number >= 0"));
  CHECK(has(r.output, (ck / "step-6/state.json").string() + ": best.step and best.evaluated_step must be at most"));
  CHECK(has(r.output, "resumed from " + (ck / "step-4").string() + " at step 4"));
}

TEST_CASE("pruning never deletes a checkpoint it could not verify", "[e2e]") {
  auto dir = scratch_dir("prune_unverified");
  write_file(dir / "c.yaml", tiny_config("c", 4, "checkpoint: {every_steps: 2, keep_last: 2}\n"));
  const std::string cfg = (dir / "c.yaml").string() + " --out-dir " + (dir / "runs").string();
  REQUIRE(run_trainer("run " + cfg).exit_code == 0);
  const fs::path ck = dir / "runs/c/checkpoints";
  flip_byte(ck / "step-2/model.safetensors", 200);
  auto r = run_trainer("run " + cfg + " --set train.max_steps=8");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(has(r.output, "keeping " + (ck / "step-2").string() + ": it does not verify"));
  CHECK(fs::exists(ck / "step-2"));     // damaged: kept for a person
  CHECK_FALSE(fs::exists(ck / "step-4"));  // verified, older than the newest two: pruned
  CHECK(fs::exists(ck / "step-6"));
  CHECK(fs::exists(ck / "step-8"));
}

TEST_CASE("metrics.jsonl on a full disk: one warning, the lost records counted, never a torn line, exit 1", "[e2e]") {
  auto dir = scratch_dir("metrics_full");
  TmpfsMount small(dir / "small", "256k");
  REQUIRE(small.mounted());
  write_file(dir / "small/filler", std::string(216 * 1024, 'x'));  // ~40 KB left: a few dozen records
  write_file(dir / "c.yaml", tiny_config("c", 200, "checkpoint: {dir: " + (dir / "ckpt").string() + "}\n"));
  auto r = run_trainer("run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "small/runs").string());
  INFO(r.output);
  // the checkpoints are safe, but what a sweep or a report reads of the run is not whole: not exit 0
  // (it was, and a sweep waited for a summary that never came)
  CHECK(r.exit_code == 1);
  CHECK(has(r.output, "the run ended and its final checkpoint is saved, but "));
  const auto metrics = dir / "small/runs/c/metrics.jsonl";
  const std::string warning = metrics.string() + ": cannot write a record (No space left on device)";
  CHECK(has(r.output, warning));
  CHECK(r.output.find(warning) == r.output.rfind(warning));  // once
  CHECK(has(r.output, metrics.string() + ": "));
  CHECK(has(r.output, " record(s) could not be written and are missing from the file"));
  std::istringstream in(read_file(metrics));
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    INFO(line);
    CHECK(nlohmann::json::parse(line, nullptr, false).is_object());
  }
  CHECK(lines > 0);
  CHECK(lines < 200);
  CHECK(fs::exists(dir / "ckpt/step-200/manifest.json"));
}

// Records lost, then a stop signal: exit 75 (the checkpoint is saved: requeue), and the attempt that
// ends the run exits 1, its checkpoint having kept the count (it exited 0: the records were gone).
TEST_CASE("metrics.jsonl on a full disk, then a stop signal: the resumed run that ends exits 1", "[e2e]") {
  auto dir = scratch_dir("metrics_full_signal");
  TmpfsMount small(dir / "small", "256k");
  REQUIRE(small.mounted());
  write_file(dir / "small/filler", std::string(216 * 1024, 'x'));
  write_file(dir / "c.yaml", tiny_config("c", 200, "checkpoint: {dir: " + (dir / "ckpt").string() + "}\n"));
  const std::string cmd = "run " + (dir / "c.yaml").string() + " --out-dir " + (dir / "small/runs").string();
  auto stopped = run_trainer(cmd, "TRAINER_INJECT_SIGNAL=150");
  INFO(stopped.output);
  REQUIRE(stopped.exit_code == 75);
  CHECK(has(stopped.output, " record(s) could not be written and are missing from the file"));
  fs::remove(dir / "small/filler");  // room again: this attempt loses nothing
  auto resumed = run_trainer(cmd);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 1);
  CHECK(has(resumed.output, " by earlier attempts, stopped by a signal): exiting with code 1"));
  CHECK(fs::exists(dir / "ckpt/step-200/manifest.json"));
  // the same command again: complete, but the records are still missing (it said "already complete",
  // exit 0, found from outside)
  auto again = run_trainer(cmd);
  INFO(again.output);
  CHECK(again.exit_code == 1);
  CHECK(has(again.output, "the run is already complete (200 of 200 steps)"));
  CHECK(has(again.output, "the run is complete and its final checkpoint is saved, but "));
  CHECK(has(again.output, " were lost by the attempts that trained it (they could not be written then, and cannot be "
                          "now): exiting with code 1"));
}

TEST_CASE("checkpoint folders are one run's: a running run's default checkpoints/ is locked, a checkpoint.dir holding "
          "another run's checkpoints is refused, a changed checkpoint.dir does not start over in silence",
          "[e2e]") {
  auto dir = scratch_dir("ckpt_folder_owner");
  const fs::path runs = dir / "runs";
  // 1. a running run's checkpoints/ named by another run's checkpoint.dir (its pruning deleted the
  //    first run's saves, and a rerun resumed the other run's weights)
  write_file(dir / "a.yaml", tiny_config("a", 1000000, "checkpoint: {every_steps: 5}\n"));
  start_trainer("run " + (dir / "a.yaml").string() + " --out-dir " + runs.string(), dir / "a.log", dir / "a.rc");
  // (keep_last prunes fast: any complete checkpoint will do)
  const bool saved_one = wait_for([&] { return !io::step_folders_newest_first(runs / "a/checkpoints").empty(); });
  if (!saved_one) ::kill(lock_holder(runs / "a/.lock"), SIGTERM);  // leave no run behind
  REQUIRE(saved_one);
  const std::string into_a = "checkpoint: {every_steps: 5, keep_last: 1, dir: " + (runs / "a/checkpoints").string() + "}\n";
  write_file(dir / "b.yaml", tiny_config("b", 20, into_a));
  auto busy = run_trainer("run " + (dir / "b.yaml").string() + " --out-dir " + runs.string());
  INFO(busy.output);
  CHECK(busy.exit_code == 1);
  CHECK(has(busy.output, "checkpoint.dir " + (runs / "a/checkpoints").string() + " is in use by another trainer run (pid "));
  CHECK(has(busy.output, "choose another checkpoint.dir"));
  REQUIRE(::kill(lock_holder(runs / "a/.lock"), SIGTERM) == 0);
  REQUIRE(wait_rc(dir / "a.rc") == 75);
  const auto saved = io::step_folders_newest_first(runs / "a/checkpoints");
  REQUIRE_FALSE(saved.empty());

  // 2. the same once the first run stopped: its checkpoints are not the second run's to resume or prune
  auto other = run_trainer("run " + (dir / "b.yaml").string() + " --out-dir " + runs.string());
  INFO(other.output);
  CHECK(other.exit_code == 1);
  CHECK(has(other.output, "holds the checkpoints of another run (" + saved.front().path.filename().string() +
                              " was saved by the run in " + fs::weakly_canonical(runs / "a").string()));
  CHECK(io::step_folders_newest_first(runs / "a/checkpoints").size() == saved.size());  // nothing pruned
  CHECK(has(other.output, "Give this run its own checkpoint.dir (another folder, or \"\" for <run dir>/checkpoints); "
                          "to start from one of them, do that and also pass --resume " + saved.front().path.string()));
  //    the advice, followed: its own checkpoint.dir and --resume start it from a's checkpoint (the first
  //    advice, --resume alone, was refused again)
  const int64_t from = saved.front().step;
  auto followed = run_trainer("run " + (dir / "b.yaml").string() + " --out-dir " + runs.string() +
                              " --set checkpoint.dir= --set train.max_steps=" + std::to_string(from + 2) + " --resume " +
                              saved.front().path.string());
  INFO(followed.output);
  CHECK(followed.exit_code == 0);
  CHECK(fs::exists(runs / ("b/checkpoints/step-" + std::to_string(from + 2)) / "manifest.json"));

  // 3. checkpoint.dir changed between two attempts: the earlier attempt's checkpoints are named, not redone
  write_file(dir / "c1.yaml", tiny_config("c", 10, "checkpoint: {every_steps: 5, dir: " + (dir / "ck1").string() + "}\n"));
  write_file(dir / "c2.yaml", tiny_config("c", 20, "checkpoint: {every_steps: 5, dir: " + (dir / "ck2").string() + "}\n"));
  REQUIRE(run_trainer("run " + (dir / "c1.yaml").string() + " --out-dir " + runs.string()).exit_code == 0);
  auto moved = run_trainer("run " + (dir / "c2.yaml").string() + " --out-dir " + runs.string() +
                           " --resume auto");
  INFO(moved.output);
  CHECK(moved.exit_code == 1);
  CHECK(has(moved.output, "--resume auto: checkpoint.dir " + (dir / "ck2").string() + " holds no checkpoint, but "
                          "earlier attempts of this run saved theirs in " + (dir / "ck1").string() + " (newest step-10)"));
  CHECK(train_steps(runs / "c/metrics.jsonl").size() == 10);  // nothing trained again
  // eval of the run directory looks where its config.yaml says the checkpoints are (not its empty checkpoints/)
  auto ev = run_trainer("eval " + (dir / "c1.yaml").string() + " --checkpoint " + (runs / "c").string());
  INFO(ev.output);
  CHECK(ev.exit_code == 0);
  CHECK(has(ev.output, "eval " + (dir / "ck1/step-10").string() + " (step 10)"));
  auto ex = run_trainer("export " + (runs / "c").string() + " --out " + (dir / "c.safetensors").string());  // so does export
  INFO(ex.output);
  CHECK(ex.exit_code == 0);
  CHECK(has(ex.output, "exported " + (dir / "ck1/step-10").string()));
  // 4. the run directory itself as checkpoint.dir: a config error (it collided with its own lock)
  auto self = run_trainer("run " + (dir / "c1.yaml").string() + " --out-dir " + runs.string() +
                          " --set checkpoint.dir=" + (runs / "c").string());
  CHECK(self.exit_code == 2);
  CHECK(has(self.output, "is the run directory itself; name a folder of its own"));
  // 5. a run directory moved (renamed) with its checkpoint.dir elsewhere: the folder is taken over, not refused
  fs::rename(runs / "c", runs / "c_moved");
  auto moved_dir = run_trainer("run " + (dir / "c1.yaml").string() + " --out-dir " + runs.string() +
                               " --set run.name=c_moved");
  INFO(moved_dir.output);
  CHECK(moved_dir.exit_code == 0);
  CHECK(has(moved_dir.output, "which is gone (moved?): this run (" + fs::weakly_canonical(runs / "c_moved").string() +
                                  ") takes the folder over"));
}

TEST_CASE("a run's own checkpoints/ holding another run's newer step folder is refused by --resume auto, a copied "
          "run directory continues its checkpoints",
          "[e2e]") {
  auto dir = scratch_dir("ckpt_foreign_step");
  const fs::path runs = dir / "runs";
  const std::string every5 = "checkpoint: {every_steps: 5, keep_last: 10}\n";
  write_file(dir / "a.yaml", tiny_config("a", 10, every5));
  write_file(dir / "b.yaml", tiny_config("b", 15, every5));
  REQUIRE(run_trainer("run " + (dir / "a.yaml").string() + " --out-dir " + runs.string()).exit_code == 0);
  REQUIRE(run_trainer("run " + (dir / "b.yaml").string() + " --out-dir " + runs.string()).exit_code == 0);
  fs::copy(runs / "b/checkpoints/step-15", runs / "a/checkpoints/step-15", fs::copy_options::recursive);

  // the old code resumed b's step 15 as a's (exit 0) and a's records skipped steps 11-15
  const std::string longer = " --out-dir " + runs.string() + " --set train.max_steps=20";
  auto foreign = run_trainer("run " + (dir / "a.yaml").string() + longer);
  INFO(foreign.output);
  CHECK(foreign.exit_code == 1);
  CHECK(has(foreign.output, (runs / "a/checkpoints/step-15").string() + " was saved by another run (the run in " +
                                fs::weakly_canonical(runs / "b").string() + "), but the older checkpoints in "));
  CHECK(has(foreign.output, "Move step-15 out of the folder"));
  CHECK(train_steps(runs / "a/metrics.jsonl").size() == 10);  // nothing trained

  // the folder moved out: a copy of the whole run directory continues the original's checkpoints
  fs::remove_all(runs / "a/checkpoints/step-15");
  fs::copy(runs / "a", runs / "a2", fs::copy_options::recursive);
  auto copy = run_trainer("run " + (dir / "a.yaml").string() + longer + " --set run.name=a2");
  INFO(copy.output);
  CHECK(copy.exit_code == 0);
  CHECK(has(copy.output, "(a copied or moved run directory): this run (" + fs::weakly_canonical(runs / "a2").string()));
  const auto steps = train_steps(runs / "a2/metrics.jsonl");
  REQUIRE(steps.size() == 20);
  CHECK(steps.back() == 20);
}
