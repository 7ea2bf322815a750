// metrics.jsonl of a real run (tiny ResNet, synthetic images) against the schema in docs/METRICS.md.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <set>
#include <sstream>

#include "test_util.hpp"

namespace {

using nlohmann::json;

// key -> required?; every key of a record must be listed, every required key present, numbers numbers
struct Schema {
  std::map<std::string, bool> keys;
};

const Schema kTrain{{{"kind", true}, {"step", true}, {"epoch", true}, {"time_s", true}, {"samples", true},
                     {"loss", true}, {"lr", true}, {"grad_norm", true}, {"skipped_steps", true},
                     {"world_size", true}, {"samples_per_s", true}, {"step_ms", true}, {"data_wait_ms", true}, {"compute_ms", true},
                     {"optim_ms", true}, {"loss_scale", false}, {"tokens_per_s", false}, {"comm_ms", false}, {"tp_comm_ms", false},
                     {"rss_mb", false}, {"peak_rss_mb", false}, {"cuda_allocated_mb", false},
                     {"cuda_reserved_mb", false}, {"cuda_peak_allocated_mb", false}, {"gpu_util_pct", false}, {"mfu", false},
                     {"param_bytes", true}, {"grad_bytes", true}, {"optim_state_bytes", true}}};
const Schema kAttempt{{{"kind", true}, {"attempt", true}, {"start_step", true}, {"time_s", true}, {"resumed_from", true},
                       {"world_size", true}, {"checkpoint_dir", false}}};
const Schema kEval{{{"kind", true}, {"step", true}, {"epoch", true}, {"time_s", true}, {"loss", true},
                    {"count", true}, {"eval_ms", true}, {"best_metric", true}, {"best_value", true},
                    {"best_step", true}, {"accuracy", false}, {"top5", false}, {"ppl", false}, {"bpb", false},
                    {"ema_loss", false}, {"ema_accuracy", false}, {"ema_top5", false}, {"ema_ppl", false},
                    {"ema_bpb", false}}};
const Schema kSummary{{{"kind", true}, {"steps", true}, {"epochs", true}, {"samples", true}, {"wall_s", true},
                       {"attempts", true}, {"attempt_wall_s", true}, {"stop_reason", true}, {"best_metric", true}, {"best_value", false}, {"best_step", false},
                       {"num_parameters", true}, {"world_size", true}, {"device", true}, {"precision", true}}};

void check_schema(const json& rec, const Schema& s) {
  INFO(rec.dump());
  for (const auto& [k, v] : rec.items()) {
    INFO("key " << k);
    CHECK(s.keys.count(k) == 1);
    if (k != "kind" && k != "best_metric" && k != "stop_reason" && k != "device" && k != "precision" &&
        k != "resumed_from" && k != "checkpoint_dir")
      CHECK(v.is_number());
  }
  for (const auto& [k, required] : s.keys)
    if (required) CHECK(rec.contains(k));
}

}  // namespace

TEST_CASE("metrics.jsonl of an image run follows the documented schema", "[e2e]") {
  auto dir = trainer::test::scratch_dir("obs_schema");
  trainer::test::write_file(dir / "tiny.yaml", R"(run: {name: img, seed: 1}
model: {arch: resnet, depth: 8, stem: cifar, in_channels: 1, num_classes: 4, width: 0.25}
data: {format: synthetic, workers: 1, synthetic: {num_samples: 128, val_samples: 32, image_size: 8}}
train: {batch_size: 16, grad_accum: 2, epochs: 1, log_every: 2, device: cpu, threads: 1}
optim: {name: sgd, lr: 0.05}
log: {progress: off, tensorboard: true}
)");
  auto r = trainer::test::run_trainer("run " + (dir / "tiny.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::istringstream in(trainer::test::read_file(dir / "runs/img/metrics.jsonl"));
  std::string line;
  std::map<std::string, int> kinds;
  while (std::getline(in, line)) {
    json rec = json::parse(line);
    std::string kind = rec.at("kind");
    ++kinds[kind];
    if (kind == "train") {
      check_schema(rec, kTrain);
      CHECK_FALSE(rec.contains("loss_scale"));    // fp32: no scaler
      CHECK_FALSE(rec.contains("tokens_per_s"));  // images
      CHECK_FALSE(rec.contains("comm_ms"));       // one process
      CHECK(rec.contains("rss_mb"));              // Linux: measured
      CHECK(rec.at("peak_rss_mb").get<double>() >= rec.at("rss_mb").get<double>());
      CHECK(rec.at("samples_per_s").get<double>() > 0);
    } else if (kind == "eval") {
      check_schema(rec, kEval);
      CHECK(rec.contains("accuracy"));
      CHECK(rec.contains("top5"));
      CHECK_FALSE(rec.contains("bpb"));
      CHECK(rec.at("count") == 32);
    } else if (kind == "attempt") {
      check_schema(rec, kAttempt);
      CHECK(rec.at("attempt") == 1);  // a fresh run
      CHECK(rec.at("start_step") == 0);
      CHECK(rec.at("resumed_from").is_null());
    } else {
      REQUIRE(kind == "summary");
      check_schema(rec, kSummary);
      // 128 samples / 16 = 8 batches per epoch, 2 per step: 4 steps
      CHECK(rec.at("steps") == 4);
      CHECK(rec.at("samples") == 128);
      CHECK(rec.at("epochs").get<double>() == Approx(1.0));
      CHECK(rec.at("attempts") == 1);
      CHECK(rec.at("wall_s") == rec.at("attempt_wall_s"));  // one attempt: its time is the run's
    }
  }
  CHECK(kinds == std::map<std::string, int>{{"attempt", 1}, {"eval", 1}, {"summary", 1}, {"train", 2}});
  // TensorBoard asked for: one event file in <run>/tb
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "runs/img/tb"))
    files += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  CHECK(files == 1);
  // and the report of that run
  auto rep = trainer::test::run_trainer("report " + (dir / "runs/img").string() + " --out " + (dir / "r.html").string());
  CHECK(rep.exit_code == 0);
  auto html = trainer::test::read_file(dir / "r.html");
  CHECK(html.find(">Validation accuracy<") != std::string::npos);
  CHECK(html.find("<td>samples seen</td><td>128</td>") != std::string::npos);
}

TEST_CASE("trainer report names a missing run directory and exits 2", "[e2e]") {
  auto dir = trainer::test::scratch_dir("report_cli");
  auto r = trainer::test::run_trainer("report " + (dir / "absent").string());
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("error: " + (dir / "absent").string() + ": not a run directory (no such folder)") !=
        std::string::npos);
  trainer::test::write_file(dir / "run/metrics.jsonl", "{\"kind\":\"train\",\"step\":1,\"loss\":2.0}\nnot json\n");
  r = trainer::test::run_trainer("report " + (dir / "run").string());
  // a line that is not a record is skipped with a warning, as the run itself reads past it (the whole
  // report was refused, found from outside)
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("warning: " + (dir / "run/metrics.jsonl").string() + ":2: invalid record, skipped") !=
        std::string::npos);
  trainer::test::write_file(dir / "run/metrics.jsonl", "not json\n");
  r = trainer::test::run_trainer("report " + (dir / "run").string());
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("error: " + (dir / "run/metrics.jsonl").string() + ": no valid record in it") != std::string::npos);
}
