// `trainer sweep`: the points a --set list or distribution makes, their run folders, a sweep stopped
// and run again (finished points skipped, a stopped one resumed), and the final table against each
// run's own records.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <regex>
#include <set>
#include <nlohmann/json.hpp>

#include "ckpt/hardening_util.hpp"
#include "engine/commands/sweep_plan.hpp"
#include "engine/commands/sweep_results.hpp"
#include "io/run_lock.hpp"
#include "test_util.hpp"

using trainer::test::read_file;
using trainer::test::run_trainer;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace trainer::engine;

namespace {

std::string sweep_config(const fs::path& dir, int64_t max_steps) {
  const auto file = dir / "exp.yaml";
  trainer::test::write_file(
      file, "run: {name: tiny, out_dir: runs, seed: 1}\n"
            "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 1, num_classes: 4}\n"
            "data: {format: synthetic, workers: 1, synthetic: {num_samples: 64, val_samples: 16, image_size: 8}}\n"
            "train: {batch_size: 16, max_steps: " + std::to_string(max_steps) +
            ", log_every: 1, threads: 1, precision: fp32}\n"
            "optim: {name: sgd, lr: 0.1}\nlog: {progress: off}\ncheckpoint: {every_steps: 0}\n");
  return file.string();
}

std::vector<json> records(const fs::path& run_dir, const std::string& kind) {
  std::vector<json> out;
  std::istringstream in(read_file(run_dir / "metrics.jsonl"));
  for (std::string l; std::getline(in, l);) {
    auto j = json::parse(l, nullptr, false);
    if (j.is_object() && j.value("kind", "") == kind) out.push_back(j);
  }
  return out;
}

std::vector<std::string> names(const std::vector<SweepPoint>& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(p.name);
  return out;
}

}  // namespace

TEST_CASE("sweep --set: one value is fixed, a comma list an axis, brackets and quotes keep their commas", "[unit]") {
  const auto spec = parse_sweep_sets({"optim.lr=0.01, 0.1", "train.epochs=3", "data.mean=[0.5, 0.5]",
                                      "model.widths=[1,2],[3,4]", "run.seed=\"a,b\",c"});
  CHECK(spec.fixed == std::vector<std::string>{"train.epochs=3", "data.mean=[0.5, 0.5]"});
  REQUIRE(spec.axes.size() == 3);
  CHECK(spec.axes[0].key == "optim.lr");
  CHECK(spec.axes[0].values == std::vector<std::string>{"0.01", "0.1"});
  CHECK(spec.axes[1].values == std::vector<std::string>{"[1,2]", "[3,4]"});
  CHECK(spec.axes[2].values == std::vector<std::string>{"\"a,b\"", "c"});
  CHECK(spec.grid_size() == 8);
  const auto d = parse_sweep_sets({"optim.lr=loguniform(1e-4, 1e-1)", "train.batch_size=randint(8,64)"});
  REQUIRE(d.axes.size() == 2);
  CHECK(d.axes[0].dist == SweepDist::LogUniform);
  CHECK(d.axes[0].lo == 1e-4);
  CHECK(d.axes[1].hi == 64);
}

TEST_CASE("sweep --set refuses what it cannot run: a key twice, the run folder keys, bad lists and bounds", "[unit]") {
  auto refused = [](std::vector<std::string> sets) {
    try {
      parse_sweep_sets(sets);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused({"optim.lr=0.1", "optim.lr=0.2"}).find("optim.lr is set twice") != std::string::npos);
  CHECK(refused({"run.name=a,b"}).find("names its points' run folders itself") != std::string::npos);
  CHECK(refused({"optim.lr=0.1,,0.2"}).find("an empty value between commas") != std::string::npos);
  CHECK(refused({"optim.lr=[0.1,0.2"}).find("unclosed") != std::string::npos);
  CHECK(refused({"optim.lr=0.1,0.1"}).find("the value 0.1 is listed twice") != std::string::npos);
  // one number spelled twice was two points training one config (found from outside)
  CHECK(refused({"optim.lr=1e-3,0.001"}).find("the value 0.001 is listed twice (as 1e-3)") != std::string::npos);
  CHECK(refused({"optim.lr=1e-3,0.01"}) == "accepted");
  CHECK(refused({"optim.lr=loguniform(0,1)"}).find("loguniform needs 0 < LOW") != std::string::npos);
  CHECK(refused({"optim.lr=uniform(1,0.5)"}).find("LOW must be below HIGH") != std::string::npos);
  CHECK(refused({"optim.lr=uniform(a,1)"}).find("'a' is not a finite number") != std::string::npos);
  CHECK(refused({"train.batch_size=randint(1.5,4)"}).find("whole numbers") != std::string::npos);
  CHECK(refused({"optim.lr"}).find("expected KEY=VALUE") != std::string::npos);
  CHECK_THROWS_WITH(grid_points(parse_sweep_sets({"optim.lr=uniform(0,1)"})),
                    Catch::Contains("add --random N"));
}

TEST_CASE("sweep grid: every combination, the first axis slowest, folder names from the values", "[unit]") {
  const auto spec = parse_sweep_sets({"optim.lr=0.01,0.1", "train.batch_size=64,128", "model.widths=[1, 2],[3/4]"});
  const auto points = grid_points(spec);
  REQUIRE(points.size() == 8);
  CHECK(points[0].name == "lr=0.01,batch_size=64,widths=1_2");
  CHECK(points[1].name == "lr=0.01,batch_size=64,widths=3_4");
  CHECK(points[2].name == "lr=0.01,batch_size=128,widths=1_2");
  CHECK(points[7].name == "lr=0.1,batch_size=128,widths=3_4");
  CHECK(points[7].overrides() ==
        std::vector<std::string>{"optim.lr=0.1", "train.batch_size=128", "model.widths=[3/4]"});
  // two axes with one leaf name: the whole keys
  const auto same_leaf = grid_points(parse_sweep_sets({"optim.lr=1,2", "other.lr=3,4"}));
  CHECK(same_leaf[1].name == "optim.lr=1,other.lr=4");
  // values a folder name cannot tell apart get a suffix
  const auto clash = grid_points(parse_sweep_sets({"run.tag=a/b,a:b"}));
  CHECK(names(clash) == std::vector<std::string>{"tag=a_b", "tag=a_b-2"});
}

TEST_CASE("the sweep table writes a diverged point's huge loss in 4 significant digits, a normal one in 4 decimals",
          "[unit]") {
  SweepRow diverged{"lr=10", {{"optim.lr", "10"}}, "done", {}};
  diverged.records.train_loss = 3.0e30;
  diverged.records.best_metric = "loss";
  diverged.records.best_value = 2.5e12;
  SweepRow fine{"lr=0.1", {{"optim.lr", "0.1"}}, "done", {}};
  fine.records.train_loss = 0.123456;
  const std::string table = rows_table({diverged, fine});
  CHECK(table.find("3e+30") != std::string::npos);
  CHECK(table.find("loss 2.5e+12") != std::string::npos);
  CHECK(table.find("0.1235") != std::string::npos);
  CHECK(table.find("000000000") == std::string::npos);
}

TEST_CASE("sweep --random: the same seed draws the same points, within the grid or the distribution's bounds",
          "[unit]") {
  const auto grid = parse_sweep_sets({"optim.lr=1,2,3,4,5", "train.batch_size=8,16,32"});
  const auto a = random_points(grid, 6, 7), b = random_points(grid, 6, 7), c = random_points(grid, 6, 8);
  CHECK(names(a) == names(b));
  CHECK(names(a) != names(c));
  const auto drawn = names(a);
  std::set<std::string> distinct(drawn.begin(), drawn.end());
  CHECK(distinct.size() == 6);  // distinct grid points
  CHECK(random_points(grid, 20, 1).size() == 15);  // no more than the grid

  const auto dist = parse_sweep_sets({"optim.lr=loguniform(1e-4,1e-1)", "train.batch_size=randint(8,10)",
                                      "optim.momentum=uniform(0.8,0.99)", "optim.name=sgd,adamw"});
  const auto ps = random_points(dist, 200, 3);
  REQUIRE(ps.size() == 200);
  std::set<std::string> batch;
  for (const auto& p : ps) {
    const double lr = std::stod(p.values[0].second), m = std::stod(p.values[2].second);
    CHECK((lr >= 1e-4 && lr <= 1e-1));
    CHECK((m >= 0.8 && m <= 0.99));
    CHECK(p.values[0].second == fmt::format("{:.4g}", lr));  // the name's value is the value run
    batch.insert(p.values[1].second);
  }
  CHECK(batch == std::set<std::string>{"8", "9", "10"});  // randint's bounds inclusive
  const auto all = names(ps);
  CHECK(names(random_points(dist, 5, 3)) == std::vector<std::string>(all.begin(), all.begin() + 5));
}

TEST_CASE("trainer sweep runs a 2x2 grid, one run folder per point, its table the runs' own records", "[e2e]") {
  const auto dir = trainer::test::scratch_dir("sweep_grid");
  const auto cfg = sweep_config(dir, 4);
  auto r = run_trainer("sweep " + cfg + " --set optim.lr=0.01,0.1 --set train.batch_size=8,16 --set optim.momentum=0.5");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const fs::path sweep = dir / "runs/tiny-sweep";
  const auto state = json::parse(read_file(sweep / "sweep.json"));
  REQUIRE(state["points"].size() == 4);
  const std::vector<std::string> expected{"lr=0.01,batch_size=8", "lr=0.01,batch_size=16", "lr=0.1,batch_size=8",
                                          "lr=0.1,batch_size=16"};
  for (size_t i = 0; i < 4; ++i) {
    const auto& p = state["points"][i];
    CHECK(p["name"] == expected[i]);
    CHECK(p["status"] == "done");
    const fs::path run = sweep / expected[i];
    // the point's values and the fixed --set in its own config
    const auto saved = read_file(run / "config.yaml");
    CHECK(saved.find(std::string("  lr: ") + (i < 2 ? "0.01" : "0.1") + "\n") != std::string::npos);
    CHECK(saved.find(std::string("  batch_size: ") + (i % 2 ? "16" : "8") + "\n") != std::string::npos);
    CHECK(saved.find("  momentum: 0.5\n") != std::string::npos);
    // the table's figures are the run's last records
    const auto train = records(run, "train"), eval = records(run, "eval"), summary = records(run, "summary");
    REQUIRE(!train.empty());
    REQUIRE(!eval.empty());
    REQUIRE(summary.size() == 1);
    CHECK(p["steps"] == 4);
    CHECK(p["train_loss"].get<double>() == train.back()["loss"].get<double>());
    CHECK(p["val_loss"].get<double>() == eval.back()["loss"].get<double>());
    CHECK(p["val_accuracy"].get<double>() == eval.back()["accuracy"].get<double>());
    CHECK(p["wall_s"].get<double>() == summary[0]["wall_s"].get<double>());
    // ... and its printed line
    CHECK(r.output.find(fmt::format("{:<21}  done    {:>5}  {:>10.4f}  {:>8.4f}", expected[i], 4,
                                    train.back()["loss"].get<double>(), eval.back()["loss"].get<double>())) !=
          std::string::npos);
  }
  // different points trained differently
  CHECK(state["points"][0]["train_loss"] != state["points"][3]["train_loss"]);

  // the sweep's folder as one report: every point, in the sweep's order, the two keys that differ
  auto rep = run_trainer("report " + sweep.string());
  INFO(rep.output);
  REQUIRE(rep.exit_code == 0);
  CHECK(rep.output.find("report written to " + (sweep / "report.html").string() + " (4 runs)") != std::string::npos);
  const auto page = read_file(sweep / "report.html");
  size_t at = 0;
  for (const auto& name : expected) {
    const auto p = page.find("</span> " + name + "</td><td>finished</td>");
    CHECK(p != std::string::npos);
    CHECK(p >= at);
    at = p;
  }
  CHECK(page.find("<th>optim.lr</th>") != std::string::npos);
  CHECK(page.find("<th>train.batch_size</th>") != std::string::npos);
  CHECK(page.find("<th>optim.momentum</th>") == std::string::npos);  // the same for all
  // two run folders named on the command line
  auto two = run_trainer("report " + (sweep / expected[0]).string() + " " + (sweep / expected[3]).string() + " --out " +
                         (dir / "two.html").string());
  INFO(two.output);
  CHECK(two.exit_code == 0);
  CHECK(read_file(dir / "two.html").find("<h1>trainer report: 2 runs</h1>") != std::string::npos);
  auto missing = run_trainer("report " + (sweep / expected[0]).string() + " " + (dir / "nope").string());
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("nope: not a run directory") != std::string::npos);
}

TEST_CASE("a sweep stopped by SIGTERM exits 75, and the same command skips the finished points and resumes the "
          "stopped one", "[e2e]") {
  const auto dir = trainer::test::scratch_dir("sweep_resume");
  const auto cfg = sweep_config(dir, 600);
  const fs::path sweep = dir / "runs/tiny-sweep";
  // the first point finished by an earlier run of its own (the same config the sweep gives it)
  auto pre = run_trainer("run " + cfg + " --set optim.lr=0.001 --out-dir " + sweep.string() + " --set run.name=lr=0.001",
                         trainer::test::timeout_prefix(600));
  INFO(pre.output);
  REQUIRE(pre.exit_code == 0);
  const auto done_metrics = read_file(sweep / "lr=0.001/metrics.jsonl");

  const auto log = dir / "sweep.log";
  const pid_t pid = trainer::test::spawn_trainer({"sweep", cfg, "--set", "optim.lr=0.001,0.002,0.003"}, log);
  // the second point is training: stop the sweep
  REQUIRE(trainer::test::wait_for([&] { return !records(sweep / "lr=0.002", "train").empty(); }));
  ::kill(pid, SIGTERM);
  const int rc = trainer::test::wait_pid(pid);
  const auto out = read_file(log);
  INFO(out);
  REQUIRE(rc == 75);
  CHECK(out.find("[1/3] lr=0.001: finished before; skipped") != std::string::npos);
  CHECK(out.find("forwarded to the 1 running point(s); no new point starts") != std::string::npos);
  CHECK(out.find("lr=0.002: stopped after saving a checkpoint") != std::string::npos);
  CHECK(!fs::exists(sweep / "lr=0.003"));
  auto state = json::parse(read_file(sweep / "sweep.json"));
  CHECK(state["points"][1]["status"] == "stopped");
  CHECK(state["points"][2]["status"] == "not run");
  CHECK(read_file(sweep / "lr=0.001/metrics.jsonl") == done_metrics);

  auto again = run_trainer("sweep " + cfg + " --set optim.lr=0.001,0.002,0.003", trainer::test::timeout_prefix(900));
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK(again.output.find("[1/3] lr=0.001: finished before; skipped") != std::string::npos);
  CHECK(again.output.find("[2/3] lr=0.002: resuming") != std::string::npos);
  CHECK(again.output.find("[3/3] lr=0.003: started") != std::string::npos);
  CHECK(records(sweep / "lr=0.002", "attempt").size() == 2);
  CHECK(records(sweep / "lr=0.002", "summary").size() == 1);
  CHECK(read_file(sweep / "lr=0.001/metrics.jsonl") == done_metrics);  // never run again
  state = json::parse(read_file(sweep / "sweep.json"));
  CHECK(state["points"][0]["status"] == "done before");
  CHECK(state["points"][1]["status"] == "done");
  CHECK(state["points"][2]["status"] == "done");
}

TEST_CASE("a sweep with a bad point starts nothing: the point and its key named, exit 2", "[e2e]") {
  const auto dir = trainer::test::scratch_dir("sweep_bad");
  const auto cfg = sweep_config(dir, 2);
  auto r = run_trainer("sweep " + cfg + " --set optim.lr=0.1,-1 --set train.batch_size=8,16");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("point lr=-1,batch_size=8:") != std::string::npos);
  CHECK(r.output.find("optim.lr") != std::string::npos);
  CHECK(r.output.find("nothing was started") != std::string::npos);
  CHECK(!fs::exists(dir / "runs/tiny-sweep/lr=0.1,batch_size=8"));

  auto none = run_trainer("sweep " + cfg + " --set optim.lr=0.1");
  CHECK(none.exit_code == 2);
  CHECK(none.output.find("nothing to sweep") != std::string::npos);
  auto dist = run_trainer("sweep " + cfg + " --set \"optim.lr=uniform(0.01,0.1)\"");
  CHECK(dist.exit_code == 2);
  CHECK(dist.output.find("add --random N") != std::string::npos);
}

// Found from outside: the file was validated without the axes' values (a key left to the sweep was
// "missing"), and a data file that does not exist started every point, each failing with exit 2.
TEST_CASE("a sweep validates each point whole: a key the file leaves to an axis, a missing data file", "[e2e]") {
  const auto dir = trainer::test::scratch_dir("sweep_points_whole");
  std::string text = read_file(sweep_config(dir, 2));
  text.replace(text.find("max_steps: 2, "), std::string("max_steps: 2, ").size(), "");
  trainer::test::write_file(dir / "nosteps.yaml", text);
  auto axis = run_trainer("sweep " + (dir / "nosteps.yaml").string() + " --set train.max_steps=1,2 --dry-run");
  INFO(axis.output);
  CHECK(axis.exit_code == 0);
  CHECK(axis.output.find("sweep: 2 points of ") != std::string::npos);
  auto ran = run_trainer("sweep " + (dir / "nosteps.yaml").string() + " --set train.max_steps=1,2");
  INFO(ran.output);
  CHECK(ran.exit_code == 0);
  CHECK(records(dir / "runs/tiny-sweep/max_steps=2", "train").size() == 2);

  trainer::test::write_file(dir / "a.txt", std::string(3000, 'a'));
  trainer::test::write_file(dir / "text.yaml",
                            "run: {name: tt, out_dir: " + (dir / "runs").string() + "}\n"
                            "model: {arch: gpt, vocab_size: 256, block_size: 8, n_layer: 1, n_head: 1, n_embd: 8}\n"
                            "data: {format: text, path: " + (dir / "a.txt").string() + ", workers: 0}\n"
                            "train: {batch_size: 4, max_steps: 1, threads: 1, precision: fp32}\nlog: {progress: off}\n");
  auto paths = run_trainer("sweep " + (dir / "text.yaml").string() + " --set data.path=" + (dir / "a.txt").string() +
                           "," + (dir / "b.txt").string());
  INFO(paths.output);
  CHECK(paths.exit_code == 2);
  CHECK(paths.output.find("data.path: " + (dir / "b.txt").string() + ": no such file or folder") != std::string::npos);
  CHECK(paths.output.find("nothing was started") != std::string::npos);
  CHECK(!fs::exists(dir / "runs/tt-sweep"));
}

TEST_CASE("a sweep point whose folder holds a run of another config is refused, naming the keys", "[e2e]") {
  const auto dir = trainer::test::scratch_dir("sweep_changed");
  const auto cfg = sweep_config(dir, 2);
  auto first = run_trainer("sweep " + cfg + " --set optim.lr=0.01,0.1");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const auto saved = read_file(dir / "runs/tiny-sweep/lr=0.1/config.yaml");
  auto changed = run_trainer("sweep " + cfg + " --set optim.lr=0.01,0.1 --set optim.momentum=0.5");
  INFO(changed.output);
  CHECK(changed.exit_code == 2);
  CHECK(changed.output.find("error: point lr=0.01: ") != std::string::npos);
  CHECK(changed.output.find("optim.momentum 0.9 -> 0.5") != std::string::npos);
  CHECK(changed.output.find("(for a sweep: another --name or --out-dir gives the new config its own folders)") !=
        std::string::npos);
  CHECK(changed.output.find("nothing was started") != std::string::npos);
  CHECK(read_file(dir / "runs/tiny-sweep/lr=0.1/config.yaml") == saved);
  // its own folder (--name): no refusal
  auto named = run_trainer("sweep " + cfg + " --set optim.lr=0.01,0.1 --set optim.momentum=0.5 --name m05");
  INFO(named.output);
  CHECK(named.exit_code == 0);
  CHECK(fs::exists(dir / "runs/m05/lr=0.1/metrics.jsonl"));
  // a second sweep in the same folder while one runs (its lock held here): refused before any point
  {
    trainer::io::RunLock held(dir / "runs/m05/sweep.lock", "sweep folder runs/m05");
    auto twice = run_trainer("sweep " + cfg + " --set optim.lr=0.01,0.1,0.5 --set optim.momentum=0.5 --name m05");
    INFO(twice.output);
    CHECK(twice.exit_code == 2);
    CHECK(twice.output.find("nothing was started (give this sweep another --name)") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "runs/m05/lr=0.5"));
  }
}

TEST_CASE("sweep --random draws loguniform points, the same ones again, each a run folder", "[e2e]") {
  const auto dir = trainer::test::scratch_dir("sweep_random");
  const auto cfg = sweep_config(dir, 2);
  const std::string args = "sweep " + cfg + " --set \"optim.lr=loguniform(0.001,0.1)\" --random 2 --seed 5";
  auto r = run_trainer(args);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto state = json::parse(read_file(dir / "runs/tiny-sweep/sweep.json"));
  REQUIRE(state["points"].size() == 2);
  for (const auto& p : state["points"]) {
    const std::string lr = p["values"]["optim.lr"];
    CHECK(p["name"] == "lr=" + lr);
    CHECK(read_file(dir / "runs/tiny-sweep" / p["name"].get<std::string>() / "config.yaml").find("  lr: " + lr + "\n") !=
          std::string::npos);
  }
  auto again = run_trainer(args);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(again.output.find("finished before; skipped") != std::string::npos);
  CHECK(again.output.find("started") == std::string::npos);
}

TEST_CASE("sweep --jobs 2 --nproc 2 runs two points at once, each under trainer launch with two ranks", "[e2e][dist]") {
  const auto dir = trainer::test::scratch_dir("sweep_jobs");
  const auto cfg = sweep_config(dir, 3);
  trainer::test::write_file(dir / "exp.yaml",
                            std::regex_replace(read_file(dir / "exp.yaml"), std::regex("threads: 1"), "threads: 0"));
  auto r = run_trainer("sweep " + cfg + " --set optim.lr=0.01,0.1 --jobs 2 --nproc 2", trainer::test::timeout_prefix(600));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("sweep: 2 points at once: train.threads=") != std::string::npos);
  for (const char* point : {"lr=0.01", "lr=0.1"}) {
    const auto summary = records(dir / "runs/tiny-sweep" / point, "summary");
    REQUIRE(summary.size() == 1);
    CHECK(summary[0]["world_size"] == 2);
    CHECK(summary[0]["steps"] == 3);
  }
  // both were running before either ended: each started line comes before the first done line
  const auto first_done = r.output.find(": done in ");
  CHECK(r.output.find("[2/2] lr=0.1: started") < first_done);
}

// A point that failed before it logged anything was left out of the sweep's report in silence (found
// from outside: "(1 runs)" for a sweep of two): the page and the summary line name it.
TEST_CASE("trainer report of a sweep names the points that have nothing to draw", "[e2e]") {
  const auto dir = trainer::test::scratch_dir("sweep_report_failed");
  const auto cfg = sweep_config(dir, 2);
  auto sw = run_trainer("sweep " + cfg + " --set train.batch_size=16,100000");  // 64 samples: no batch of 100000
  INFO(sw.output);
  CHECK(sw.exit_code == 1);
  const auto sweep = dir / "runs/tiny-sweep";
  REQUIRE(fs::exists(sweep / "sweep.json"));
  auto rep = run_trainer("report " + sweep.string());
  INFO(rep.output);
  CHECK(rep.exit_code == 0);
  CHECK(rep.output.find("(1 runs; not drawn, no records: batch_size=100000 (failed (exit 1)))") != std::string::npos);
  CHECK(read_file(sweep / "report.html").find("<p>Not drawn: 1 point(s) of the sweep with no records: batch_size=100000 "
                                              "(failed (exit 1))</p>") != std::string::npos);
}
