// Class folders whose names are not UTF-8 (an old Latin-1 dataset), and `trainer eval / predict RUN_DIR`,
// the form a finished run's last line suggests.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <filesystem>

#include "../ckpt/ckpt_runs.hpp"
#include "data/image_decode.hpp"
#include "inference_runs.hpp"
#include "io/safetensors.hpp"
#include "test_util.hpp"

using namespace trainer::test;
namespace fs = std::filesystem;

namespace {

// root/<class>/<i>.png: 8x8 RGB images, class c brighter in channel c, with noise
void write_images(const fs::path& root, const std::vector<std::string>& classes, int per_class, uint32_t seed) {
  uint32_t s = seed;
  auto next = [&] { return (s = s * 1664525u + 1013904223u) >> 24; };
  for (size_t c = 0; c < classes.size(); ++c) {
    fs::create_directories(root / classes[c]);
    for (int i = 0; i < per_class; ++i) {
      std::vector<uint8_t> px(8 * 8 * 3);
      for (size_t p = 0; p < px.size(); ++p) px[p] = static_cast<uint8_t>((p % 3 == c ? 120 : 0) + next() / 2);
      trainer::data::write_png((root / classes[c] / (std::to_string(i) + ".png")).string(), px.data(), 8, 8, 3);
    }
  }
}

std::string hex_of(const std::string& s) {
  std::string h;
  for (unsigned char ch : s) h += fmt::format("{:02x}", ch);
  return h;
}

}  // namespace

// A class folder named in Latin-1 ("caf\xe9"): state.json's JSON could not hold the name, and every save
// of the run failed ("invalid UTF-8 byte"), so no work could ever be kept (found from outside, exit 74).
// The names now show U+FFFD in data_classes and travel in hex beside it (data_classes_hex), which is
// what a resume, eval and predict compare and print.
TEST_CASE("class folders not named in UTF-8: saved, resumed, exported and predicted with their bytes", "[e2e]") {
  auto dir = scratch_dir("class_names_latin1");
  const std::vector<std::string> classes = {"caf\xe9", "dog"};  // sorted: 'c' < 'd'
  write_images(dir / "train", classes, 8, 1);
  write_images(dir / "val", classes, 4, 2);
  write_file(dir / "exp.yaml", "run: {name: cn, out_dir: runs, seed: 3}\n"
                               "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 3, num_classes: 2}\n"
                               "data: {format: image_folder, path: train, val_path: val, workers: 1}\n"
                               "train: {batch_size: 8, max_steps: 4, log_every: 2, threads: 1}\n"
                               "checkpoint: {every_steps: 2}\noptim: {name: sgd, lr: 0.05}\nlog: {progress: off}\n");
  const std::string cfg = (dir / "exp.yaml").string();
  auto first = run_trainer("run " + cfg + " --set train.max_steps=2");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const auto run = dir / "runs" / "cn";
  const auto state = nlohmann::json::parse(read_file(run / "checkpoints" / "step-2" / "state.json"));
  CHECK(state.at("data_classes") == nlohmann::json({"caf\xEF\xBF\xBD", "dog"}));  // U+FFFD for the stray byte
  CHECK(state.at("data_classes_hex") == nlohmann::json({hex_of(classes[0]), hex_of(classes[1])}));

  // the resume compares the recorded names with the folders' (the same bytes: accepted)
  auto resumed = run_trainer("run " + cfg);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("resumed from") != std::string::npos);
  REQUIRE(fs::exists(run / "checkpoints" / "step-4"));

  // the export's metadata carries both lists (JSON text), as state.json does
  const auto exported = dir / "m.safetensors";
  REQUIRE(run_trainer("export " + run.string() + " --out " + exported.string()).exit_code == 0);
  const auto meta = trainer::io::load_safetensors(exported.string()).metadata;
  CHECK(nlohmann::json::parse(meta.at("data_classes_hex")) == state.at("data_classes_hex"));

  // predict prints the class's bytes beside its printable name, from the run directory and the export
  for (const std::string& weights : {run.string(), cfg + " --checkpoint " + exported.string()}) {
    auto pr = run_trainer("predict " + weights + " --input " + (dir / "val" / classes[0]).string() + " 2>/dev/null");
    INFO(weights << "\n" << pr.output);
    REQUIRE(pr.exit_code == 0);
    const auto lines = json_lines(pr.output);
    REQUIRE(lines.size() == 4);
    for (const auto& l : lines)
      for (const auto& t : l.at("top"))
        if (t.at("index").get<int>() == 0)
          CHECK(t.value("class_hex", std::string()) == hex_of(classes[0]));
        else
          CHECK_FALSE(t.contains("class_hex"));
  }
  // a class folder renamed since: still refused, the difference named
  for (const char* split : {"train", "val"}) fs::rename(dir / split / classes[0], dir / split / "cat");
  auto other = run_trainer("eval " + run.string());
  INFO(other.output);
  CHECK(other.exit_code == 1);
  CHECK(other.output.find("first difference: label 0") != std::string::npos);
}

// Every finished run ends "`trainer eval RUN_DIR` evaluates its newest checkpoint", and eval wanted a
// config and --checkpoint (exit 2, "File is actually a directory"). A run directory in CONFIG's place
// now means its config.yaml and, unless --checkpoint names one, its newest checkpoint.
TEST_CASE("eval and predict take a run directory for CONFIG, as a run's last line says", "[e2e]") {
  auto dir = scratch_dir("eval_run_dir");
  write_images(dir / "train", {"a", "b"}, 8, 1);
  write_images(dir / "val", {"a", "b"}, 4, 2);
  write_file(dir / "exp.yaml", "run: {name: rd, out_dir: runs, seed: 3}\n"
                               "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 3, num_classes: 2}\n"
                               "data: {format: image_folder, path: train, val_path: val, workers: 1}\n"
                               "train: {batch_size: 8, max_steps: 4, log_every: 2, threads: 1}\n"
                               "checkpoint: {every_steps: 2}\noptim: {name: sgd, lr: 0.05}\nlog: {progress: off}\n");
  // run from another folder: the run directory's config.yaml holds resolved paths
  auto r = run_trainer("run " + (dir / "exp.yaml").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto run = dir / "runs" / "rd";
  const std::string hint = "`trainer eval " + run.string() + "` evaluates its newest checkpoint";
  CHECK(r.output.find(hint) != std::string::npos);
  const auto logged = records(run / "metrics.jsonl", "eval").back();

  auto ev = run_trainer("eval " + run.string() + " 2>/dev/null", "cd / &&");
  INFO(ev.output);
  REQUIRE(ev.exit_code == 0);
  const auto rec = json_lines(ev.output).back();
  CHECK(rec.at("step") == 4);
  CHECK(rec.at("loss").get<double>() == logged.at("loss").get<double>());
  // --checkpoint still picks another one
  auto older = run_trainer("eval " + run.string() + " --checkpoint " + (run / "checkpoints" / "step-2").string() +
                           " 2>/dev/null");
  REQUIRE(older.exit_code == 0);
  CHECK(json_lines(older.output).back().at("step") == 2);
  auto pr = run_trainer("predict " + run.string() + " --input " + (dir / "val" / "a").string() + " 2>/dev/null");
  REQUIRE(pr.exit_code == 0);
  CHECK(json_lines(pr.output).size() == 4);

  // a folder that is not a run directory, and a config file without --checkpoint: exit 2, said
  auto no_run = run_trainer("eval " + (dir / "train").string());
  CHECK(no_run.exit_code == 2);
  CHECK(no_run.output.find("is a folder without config.yaml") != std::string::npos);
  for (const char* cmd : {"eval", "predict"}) {
    auto no_ckpt = run_trainer(std::string(cmd) + " " + (dir / "exp.yaml").string());
    INFO(no_ckpt.output);
    CHECK(no_ckpt.exit_code == 2);
    CHECK(no_ckpt.output.find(std::string(cmd) + ": --checkpoint is required with a config file") != std::string::npos);
  }
}
