// `trainer bench-data CONFIG`: the configured input pipeline without a model. Its rates are this
// machine's (not checked); what is checked: a line per worker count, the stage split of a JPEG
// folder (read, decode, augment, collate) adding up to 100 %, the workers it says keep a run fed
// (the run's rate without its data wait over the measured rate per worker, rounded up), bad
// arguments and --run files that give no rate (exit 2 before measuring, named), data that does not
// fit the model measured with a note.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cmath>
#include <regex>

#include "data/fixtures.hpp"
#include "test_util.hpp"

using namespace trainer;
using test::run_trainer;
namespace fs = std::filesystem;

namespace {

std::string folder_config(const fs::path& dir) {
  test::write_image_folder(dir / "images", {"a", "b"}, 12, 40, 48, /*png=*/false);
  const auto file = dir / "bd.yaml";
  test::write_file(file, "run: {name: bd, seed: 1}\n"
                         "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 3, num_classes: 2}\n"
                         "data: {format: image_folder, path: " + (dir / "images").string() +
                         ", image_size: 24, workers: 1, augment: {hflip: true, random_resized_crop: true}}\n"
                         "train: {batch_size: 4, max_steps: 5}\n");
  return file.string();
}

}  // namespace

TEST_CASE("bench-data: a line per worker count, the JPEG pipeline's stages adding up to 100 %", "[e2e]") {
  auto dir = test::scratch_dir("bench_data_folder");
  const auto cfg = folder_config(dir);
  auto r = run_trainer("bench-data " + cfg + " --workers 0,2,1 --batches 3");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("(training pipeline): image_folder ") != std::string::npos);
  const std::regex row(R"(\n\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)  read (\d+) %, decode (\d+) %, augment (\d+) %, collate (\d+) %)");
  std::vector<int> seen;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), row); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    seen.push_back(std::stoi(m[1].str()));
    CHECK(std::stod(m[2].str()) > 0);
    const int sum = std::stoi(m[4].str()) + std::stoi(m[5].str()) + std::stoi(m[6].str()) + std::stoi(m[7].str());
    CHECK(std::abs(sum - 100) <= 2);  // each rounded to a whole percent
    CHECK(std::stoi(m[5].str()) > 0);  // a JPEG folder decodes
  }
  CHECK(seen == std::vector<int>{0, 1, 2});  // sorted, each once
  // the kernels this pipeline runs (no colour jitter here: none named)
  CHECK(std::regex_search(r.output, std::regex(R"(kernels: resize (AVX-512|AVX2|baseline), normaliser )"
                                               R"((AVX512-VBMI permutes|AVX-512 gathers|scalar)\))")));
  // ATen's cap caps the data kernels too: the baseline resize, the scalar lookup, the jitter's clones
  auto capped = run_trainer("bench-data " + cfg + " --workers 1 --batches 3 --set data.augment.brightness=0.4 "
                            "--set data.augment.hue=0.1", "ATEN_CPU_CAPABILITY=default");
  INFO(capped.output);
  CHECK(capped.exit_code == 0);
  CHECK(capped.output.find("kernels: resize baseline, normaliser scalar, colour jitter clones, hue scalar)") != std::string::npos);
  auto jitter = run_trainer("bench-data " + cfg + " --workers 1 --batches 3 --set data.augment.saturation=0.4");
  CHECK(std::regex_search(jitter.output, std::regex(R"(normaliser [^,]+, colour jitter (AVX-512|clones)\))")));
  // fewer timed batches than 3 a worker would time the workers' phase: raised, and said
  CHECK(r.output.find("(--batches 3 raised to 6 for 2 worker(s): at least 3 a worker)") != std::string::npos);
  CHECK(r.output.find("raised to 3 for 1") == std::string::npos);
  auto v = run_trainer("bench-data " + cfg + " --val --workers 1 --batches 2");
  INFO(v.output);
  CHECK(v.exit_code == 2);  // no validation split configured
  CHECK(v.output.find("has no validation split") != std::string::npos);
}

TEST_CASE("bench-data: data a run would refuse for its model is measured, with the reason said once", "[e2e]") {
  // a 2-class folder benchmarked with a 1000-class config (a subset of ImageNet, the shipped
  // resnet50 config): no model is built here, so the pipeline is measured, and the user is told
  auto dir = test::scratch_dir("bench_data_classes");
  const auto cfg = folder_config(dir);
  auto r = run_trainer("bench-data " + cfg + " --workers 1 --batches 3 --set model.num_classes=1000");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("note: `trainer run` would refuse this config's data for its model: ") != std::string::npos);
  CHECK(r.output.find("the data has 2 classes but model.num_classes is 1000") != std::string::npos);
  CHECK(std::regex_search(r.output, std::regex(R"(\n\s+1\s+[0-9.]+\s+[0-9.]+  read)")));
  auto run = run_trainer("check " + cfg + " --set model.num_classes=1000");  // a run still refuses it
  CHECK(run.exit_code != 0);
  CHECK(run.output.find("the data has 2 classes but model.num_classes is 1000") != std::string::npos);
  auto fine = run_trainer("bench-data " + cfg + " --workers 1 --batches 3");
  CHECK(fine.exit_code == 0);
  CHECK(fine.output.find("would refuse") == std::string::npos);
}

TEST_CASE("bench-data --run: the workers that keep a run fed, from its rate without the data wait", "[e2e]") {
  auto dir = test::scratch_dir("bench_data_run");
  const auto cfg = folder_config(dir);
  // the first record (start-up) is left out; the others: 100 samples/s at 10 ms a step, 5 of them waiting
  // for data, so the step alone runs at 200 samples/s (median of 3)
  test::write_file(dir / "run/metrics.jsonl",
                   "{\"kind\": \"train\", \"step\": 1, \"samples_per_s\": 1, \"step_ms\": 900, \"data_wait_ms\": 0}\n"
                   "{\"kind\": \"eval\", \"step\": 1, \"loss\": 1.0}\n"
                   "{\"kind\": \"train\", \"step\": 2, \"samples_per_s\": 100, \"step_ms\": 10, \"data_wait_ms\": 5}\n"
                   "{\"kind\": \"train\", \"step\": 3, \"samples_per_s\": 90, \"step_ms\": 10, \"data_wait_ms\": 4}\n"
                   "{\"kind\": \"train\", \"step\": 4, \"samples_per_s\": 120, \"step_ms\": 10, \"data_wait_ms\": 5}\n"
                   "{\"kind\": \"train\", \"step\": 5, \"samp");  // a killed run's unterminated last line
  auto r = run_trainer("bench-data " + cfg + " --workers 1 --batches 3 --run " + (dir / "run").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.output, m, std::regex(R"(consumes ([0-9.]+) samples/s without its data wait \(median of 3 records\); at ([0-9.]+) samples/s a worker \(measured with 1\) about (\d+) worker\(s\))")));
  CHECK(m[1].str() == "200.0");  // 90 x 10 / 6 = 150, 100 x 10 / 5 = 200, 120 x 10 / 5 = 240
  const double per_worker = std::stod(m[2].str());
  REQUIRE(per_worker > 0);
  const int64_t needed = std::stoll(m[3].str());
  CHECK(needed >= 1);
  // the printed per-worker rate is rounded to 0.1: the count is the ceiling of 200 over the exact one
  CHECK(needed >= static_cast<int64_t>(std::ceil(200 / (per_worker + 0.05))));
  CHECK(needed <= static_cast<int64_t>(std::ceil(200 / std::max(0.05, per_worker - 0.05))));
  // no config.yaml beside the records: the rate may be another config's, and the output says so
  CHECK(r.output.find("note: the run in " + (dir / "run").string() + " has no config this build reads (") !=
        std::string::npos);

  // the run's config.yaml is this config: no note; another batch and model: a note naming the keys
  fs::copy_file(cfg, dir / "run/config.yaml");
  auto same = run_trainer("bench-data " + cfg + " --workers 1 --batches 3 --run " + (dir / "run").string());
  INFO(same.output);
  REQUIRE(same.exit_code == 0);
  CHECK(same.output.find("note: the run in") == std::string::npos);
  std::string other = test::read_file(cfg);
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"batch_size: 4", "batch_size: 8"},
                                 {"depth: 8", "depth: 14"}}) {
    REQUIRE(other.find(from) != std::string::npos);
    other.replace(other.find(from), from.size(), to);
  }
  test::write_file(dir / "run/config.yaml", other);
  auto changed = run_trainer("bench-data " + cfg + " --workers 1 --batches 3 --run " + (dir / "run").string());
  INFO(changed.output);
  REQUIRE(changed.exit_code == 0);
  CHECK(changed.output.find("note: the run in " + (dir / "run").string() + " was trained with another config (" +
                            (dir / "run/config.yaml").string() + " -> this one: model.depth 14 -> 8") !=
        std::string::npos);
  CHECK(changed.output.find("train.batch_size 8 -> 4") != std::string::npos);
  CHECK(changed.output.find("its step rate is that config's model and batch") != std::string::npos);
}

// token windows have nothing to decode or augment: their time was labelled "augment" (found from outside)
TEST_CASE("bench-data: token and synthetic data name a sample's time by what it is", "[e2e]") {
  auto dir = test::scratch_dir("bench_data_kinds");
  std::string text;
  for (int i = 0; i < 4000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  test::write_file(dir / "corpus.txt", text);
  test::write_file(dir / "t.yaml", "model: {arch: gpt, vocab_size: 256, block_size: 16, n_layer: 1, n_head: 1, n_embd: 8}\n"
                                   "data: {format: text, path: " + (dir / "corpus.txt").string() + ", workers: 1}\n"
                                   "train: {batch_size: 4, max_steps: 5}\n");
  auto tokens = run_trainer("bench-data " + (dir / "t.yaml").string() + " --workers 1 --batches 3");
  INFO(tokens.output);
  CHECK(tokens.exit_code == 0);
  const std::regex token_row(R"(\n\s+1\s+[0-9.]+\s+[0-9.]+  read (\d+) % \(token windows\), collate (\d+) %\n)");
  std::smatch m;
  REQUIRE(std::regex_search(tokens.output, m, token_row));
  CHECK(std::abs(std::stoi(m[1]) + std::stoi(m[2]) - 100) <= 1);
  CHECK(tokens.output.find("augment") == std::string::npos);
  auto synthetic = run_trainer("bench-data " + std::string(TRAINER_SOURCE_DIR) + "/configs/tiny_synthetic.yaml --workers 1 --batches 3");
  INFO(synthetic.output);
  CHECK(synthetic.exit_code == 0);
  CHECK(std::regex_search(synthetic.output, std::regex(R"(\n\s+1\s+[0-9.]+\s+[0-9.]+  generate \d+ %, collate \d+ %\n)")));
}

TEST_CASE("bench-data: bad arguments exit 2 and say what is wrong", "[e2e]") {
  auto dir = test::scratch_dir("bench_data_bad");
  const auto cfg = folder_config(dir);
  auto many = run_trainer("bench-data " + cfg + " --workers 1,300");
  CHECK(many.exit_code == 2);
  CHECK(many.output.find("--workers: '300' workers: give 0 to 256") != std::string::npos);
  auto letters = run_trainer("bench-data " + cfg + " --workers 1,a");  // CLI11 said "a not in range 0 to 256"
  CHECK(letters.exit_code == 2);
  CHECK(letters.output.find("--workers: 'a' is not a worker count (a whole number from 0 to 256)") != std::string::npos);
  auto negative = run_trainer("bench-data " + cfg + " --workers -1");
  CHECK(negative.exit_code == 2);
  CHECK(negative.output.find("'-1' is not a worker count") != std::string::npos);
  auto no_run = run_trainer("bench-data " + cfg + " --workers 1 --run " + (dir / "nowhere").string());
  INFO(no_run.output);
  CHECK(no_run.exit_code == 2);
  CHECK(no_run.output.find("no metrics.jsonl there") != std::string::npos);
  // --run files that cannot give a rate are refused before the minutes of measuring, named
  test::write_file(dir / "garbled/metrics.jsonl",
                   "{\"kind\": \"train\", \"step\": 1, \"samples_per_s\": 1, \"step_ms\": 900, \"data_wait_ms\": 0}\n"
                   "{bad\n"
                   "{\"kind\": \"train\", \"step\": 2, \"samples_per_s\": 100, \"step_ms\": 10, \"data_wait_ms\": 5}\n");
  auto garbled = run_trainer("bench-data " + cfg + " --workers 1 --run " + (dir / "garbled").string());
  INFO(garbled.output);
  CHECK(garbled.exit_code == 2);
  CHECK(garbled.output.find("metrics.jsonl:2: not a JSON record: {bad") != std::string::npos);
  CHECK(garbled.output.find("samples/s") == std::string::npos);  // nothing was measured
  test::write_file(dir / "short/metrics.jsonl",
                   "{\"kind\": \"train\", \"step\": 1, \"samples_per_s\": 1, \"step_ms\": 900, \"data_wait_ms\": 0}\n"
                   "{\"kind\": \"eval\", \"step\": 1, \"loss\": 1.0}\n");
  auto short_run = run_trainer("bench-data " + cfg + " --workers 1 --run " + (dir / "short").string());
  INFO(short_run.output);
  CHECK(short_run.exit_code == 2);
  CHECK(short_run.output.find("has 1 train record(s) and none after the first") != std::string::npos);
  // a FIFO would block the read, /dev/zero never end it: refused as files that are not regular
  fs::create_directories(dir / "fifo");
  REQUIRE(::mkfifo((dir / "fifo" / "metrics.jsonl").c_str(), 0600) == 0);
  auto fifo = test::run_shell("timeout 60 \"" + std::string(TRAINER_BIN) + "\" bench-data " + cfg + " --workers 1 --run " +
                              (dir / "fifo").string() + " 2>&1");
  INFO(fifo.output);
  CHECK(fifo.exit_code == 2);
  CHECK(fifo.output.find((dir / "fifo" / "metrics.jsonl").string() + ": is a FIFO (named pipe), not a regular file") !=
        std::string::npos);
  fs::create_directories(dir / "zero");
  fs::create_symlink("/dev/zero", dir / "zero" / "metrics.jsonl");
  auto zero_dev = run_trainer("bench-data " + cfg + " --workers 1 --run " + (dir / "zero").string());
  CHECK(zero_dev.exit_code == 2);
  CHECK(zero_dev.output.find("is a character device") != std::string::npos);
  // a forged rate no run measures: refused, not turned into a negative worker count
  test::write_file(dir / "forged/metrics.jsonl",
                   "{\"kind\": \"train\", \"step\": 1, \"samples_per_s\": 1, \"step_ms\": 900, \"data_wait_ms\": 0}\n"
                   "{\"kind\": \"train\", \"step\": 2, \"samples_per_s\": 1e30, \"step_ms\": 10, \"data_wait_ms\": 5}\n");
  auto forged = run_trainer("bench-data " + cfg + " --workers 1 --run " + (dir / "forged").string());
  INFO(forged.output);
  CHECK(forged.exit_code == 2);
  CHECK(forged.output.find("metrics.jsonl:2: samples_per_s 1e+30 with step_ms 10 and data_wait_ms 5 is not a rate a run "
                           "measures") != std::string::npos);
  auto zero = run_trainer("bench-data " + cfg + " --workers 0 --run " + (dir / "short").string());
  CHECK(zero.exit_code == 2);
  CHECK(zero.output.find("--run: give --workers a count of at least 1") != std::string::npos);
  auto bad_key = run_trainer("bench-data " + cfg + " --set data.workerz=1");
  CHECK(bad_key.exit_code == 2);
  CHECK(bad_key.output.find("data.workerz") != std::string::npos);
}
