// `trainer predict`: image folders to classes (agreeing with eval's pipeline), and sampled text.
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "../ckpt/ckpt_runs.hpp"
#include "../ckpt/hardening_util.hpp"
#include "data/image_decode.hpp"
#include "engine/commands/generate.hpp"
#include "inference_runs.hpp"
#include "test_util.hpp"

using namespace trainer::test;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kPredictClasses = {"bird", "cat", "dog"};

// root/<class>/<i>.png: 12x12 RGB images whose dominant channel is the class's, with noise.
void write_class_images(const fs::path& root, int per_class, uint32_t seed) {
  uint32_t s = seed;
  auto next = [&] { return (s = s * 1664525u + 1013904223u) >> 24; };
  for (size_t c = 0; c < kPredictClasses.size(); ++c) {
    fs::create_directories(root / kPredictClasses[c]);
    for (int i = 0; i < per_class; ++i) {
      std::vector<uint8_t> px(12 * 12 * 3);
      for (size_t p = 0; p < px.size(); ++p) px[p] = static_cast<uint8_t>((p % 3 == c ? 120 : 0) + next() / 2);
      trainer::data::write_png((root / kPredictClasses[c] / (std::to_string(i) + ".png")).string(), px.data(), 12, 12, 3);
    }
  }
}

std::string predict_image_config() {
  return "run: {name: pr, out_dir: runs, seed: 4}\n"
         "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 3, num_classes: 3}\n"
         "data: {format: image_folder, path: train, val_path: val, workers: 1, normalize: {mode: mean_std}}\n"
         "train: {batch_size: 16, max_steps: 15, log_every: 5, threads: 1}\n"
         "optim: {name: sgd, lr: 0.05, momentum: 0.9}\nlog: {progress: off}\n";
}

// The run both image tests take: 24 training and 8 validation images a class, trained by
// predict_image_config(); its run directory.
fs::path train_image_classifier(const fs::path& dir) {
  write_class_images(dir / "train", 24, 1);
  write_class_images(dir / "val", 8, 2);
  train_config(dir, predict_image_config());
  return dir / "runs" / "pr";
}

// stdout only: the JSON lines are not mixed with the log
CommandResult predict_stdout(const std::string& args) { return run_trainer("predict " + args + " 2>/dev/null"); }

std::string text_config(const std::string& corpus) {
  return "run: {name: tx, out_dir: runs, seed: 5}\n"
         "model: {arch: gpt, vocab_size: 256, block_size: 32, n_layer: 1, n_head: 2, n_embd: 32, dropout: 0.0}\n"
         "data: {format: text, path: " + corpus + ", val_fraction: 0.1, workers: 1}\n"
         "train: {batch_size: 16, max_steps: 80, log_every: 20, threads: 1}\n"
         "optim: {name: adamw, lr: 0.01}\nlog: {progress: off}\n";
}

}  // namespace

TEST_CASE("predict on an image folder: class names, top-k, and the argmax eval scored", "[e2e]") {
  auto dir = scratch_dir("predict_images");
  const auto run = train_image_classifier(dir);
  const double accuracy = records(run / "metrics.jsonl", "eval").back().at("accuracy").get<double>();
  const std::string base = (dir / "exp.yaml").string() + " --checkpoint " + run.string() + " --input ";

  auto r = predict_stdout(base + (dir / "val").string());
  REQUIRE(r.exit_code == 0);
  auto lines = json_lines(r.output);
  REQUIRE(lines.size() == 24);
  int correct = 0;
  std::set<std::string> predicted;
  for (const auto& j : lines) {
    const auto path = fs::path(j.at("path").get<std::string>());
    const auto& top = j.at("top");
    REQUIRE(top.size() == 3);  // top-5 of 3 classes
    double sum = 0;
    for (size_t i = 0; i < top.size(); ++i) {
      CHECK(top[i].at("class") == kPredictClasses[top[i].at("index").get<size_t>()]);
      if (i > 0) CHECK(top[i].at("prob").get<double>() <= top[i - 1].at("prob").get<double>());
      sum += top[i].at("prob").get<double>();
    }
    CHECK(sum == Approx(1.0).epsilon(1e-5));
    predicted.insert(top[0].at("class").get<std::string>());
    correct += top[0].at("class") == path.parent_path().filename().string();
  }
  // the same images through the data pipeline's evaluation path gave the run's accuracy
  CHECK(static_cast<double>(correct) / 24 == Approx(accuracy).epsilon(1e-12));
  CHECK(predicted.size() > 1);  // a model that learnt something, not one constant answer

  // batching does not change the answers; --top-k and --labels shape them
  auto small = predict_stdout(base + (dir / "val").string() + " --batch-size 5 --top-k 1");
  REQUIRE(small.exit_code == 0);
  auto small_lines = json_lines(small.output);
  REQUIRE(small_lines.size() == 24);
  for (size_t i = 0; i < 24; ++i) {
    REQUIRE(small_lines[i].at("top").size() == 1);
    CHECK(small_lines[i].at("top")[0].at("index") == lines[i].at("top")[0].at("index"));
    CHECK(small_lines[i].at("top")[0].at("prob").get<double>() ==
          Approx(lines[i].at("top")[0].at("prob").get<double>()).epsilon(1e-5));
  }
  write_file(dir / "labels.txt", "Bird\nCat\nDog\n");
  auto named = predict_stdout(base + (dir / "val" / "cat" / "0.png").string() + " --labels " +
                              (dir / "labels.txt").string());
  REQUIRE(named.exit_code == 0);
  auto one = json_lines(named.output);
  REQUIRE(one.size() == 1);
  CHECK(one[0].at("path") == (dir / "val" / "cat" / "0.png").string());
  const std::vector<std::string> labels = {"Bird", "Cat", "Dog"};
  for (const auto& t : one[0].at("top")) CHECK(t.at("class") == labels[t.at("index").get<size_t>()]);
  // a file name that is not UTF-8 (Latin-1 "cafe" with e-acute) prints with U+FFFD, its bytes in hex beside it;
  // a UTF-8 name has no hex
  fs::create_directories(dir / "names");
  const std::string latin1 = "caf\xe9.png";
  fs::copy_file(dir / "val" / "cat" / "0.png", dir / "names" / latin1);
  auto odd = predict_stdout(base + (dir / "names").string());
  REQUIRE(odd.exit_code == 0);
  auto odd_lines = json_lines(odd.output);
  REQUIRE(odd_lines.size() == 1);
  std::string hex;
  for (unsigned char ch : (dir / "names" / latin1).string()) hex += fmt::format("{:02x}", ch);
  CHECK(odd_lines[0].at("path_hex") == hex);
  for (const auto& t : odd_lines[0].at("top")) CHECK_FALSE(t.contains("class_hex"));  // (--labels must be UTF-8)
  CHECK_FALSE(one[0].contains("path_hex"));
}

// The normalisation statistics (data.normalize mean_std without mean and std: computed from the training
// split) were computed again by eval and predict from the training data as it was then: images added
// after the run changed every input the model saw, in silence. The checkpoint records the run's, and
// eval, predict and export use them.
TEST_CASE("eval, predict and export use the normalisation the run recorded, not the training data's now", "[e2e]") {
  auto dir = scratch_dir("recorded_normalize");
  const auto run = train_image_classifier(dir);
  const auto logged = records(run / "metrics.jsonl", "eval").back();
  const auto step_dir = run / "checkpoints" / ("step-" + std::to_string(logged.at("step").get<int64_t>()));
  const auto state = nlohmann::json::parse(read_file(step_dir / "state.json"));
  INFO(state.dump());
  REQUIRE(state.contains("data_normalize"));
  const auto& rec = state.at("data_normalize");
  CHECK(rec.at("mode") == "mean_std");
  REQUIRE(rec.at("mean").size() == 3);
  REQUIRE(rec.at("std").size() == 3);
  for (size_t c = 0; c < 3; ++c) CHECK((rec.at("mean")[c] > 0.0 && rec.at("std")[c] > 0.0));
  const std::string cfg = (dir / "exp.yaml").string();
  auto ex = run_trainer("export " + step_dir.string() + " --out " + (dir / "m.safetensors").string());
  REQUIRE(ex.exit_code == 0);
  auto before = predict_stdout(cfg + " --checkpoint " + run.string() + " --input " + (dir / "val").string());
  REQUIRE(before.exit_code == 0);

  // bright images added to the training folder: statistics computed now would differ by far
  fs::create_directories(dir / "train" / "bird");
  std::vector<uint8_t> white(12 * 12 * 3, 250);
  for (int i = 0; i < 40; ++i)
    trainer::data::write_png((dir / "train" / "bird" / ("w" + std::to_string(i) + ".png")).string(), white.data(), 12,
                             12, 3);
  for (const auto& weights : {step_dir, dir / "m.safetensors"}) {
    INFO(weights);
    auto r = run_trainer("eval " + cfg + " --checkpoint " + weights.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("data normalisation: the training run's, recorded with the weights") != std::string::npos);
    const auto got = json_lines(r.output).back();
    CHECK(got.at("loss").get<double>() == logged.at("loss").get<double>());
    CHECK(got.at("accuracy").get<double>() == logged.at("accuracy").get<double>());
  }
  auto after = predict_stdout(cfg + " --checkpoint " + run.string() + " --input " + (dir / "val").string());
  REQUIRE(after.exit_code == 0);
  CHECK(after.output == before.output);  // every probability the same

  // a record that does not hold together is refused, naming the file
  auto edited = state;
  edited["data_normalize"] = {{"mode", "mean_std"}, {"mean", {0.5, 0.5}}, {"std", {0.2}}};
  write_file(step_dir / "state.json", edited.dump());
  resign_manifest(step_dir);
  auto bad = run_trainer("eval " + cfg + " --checkpoint " + step_dir.string());
  INFO(bad.output);
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find((step_dir / "state.json").string() + ": data_normalize 'mean' and 'std' differ in length") !=
        std::string::npos);
}

// Class folders renamed after training (bird -> zebra: the sorted order, so every label, changes):
// eval scored 0 %, predict named other classes and a resume trained on with shifted labels, all exit
// 0. The weights record their class names; eval, predict and resume refuse data whose names differ.
TEST_CASE("eval, predict and resume refuse class folders other than those the weights were trained with", "[e2e]") {
  auto dir = scratch_dir("recorded_classes");
  write_class_images(dir / "train", 6, 1);
  write_class_images(dir / "val", 2, 2);
  trainer::test::write_file(dir / "exp.yaml", predict_image_config() + "checkpoint: {every_steps: 2}\n");
  const std::string cfg = (dir / "exp.yaml").string();
  REQUIRE(run_trainer("run " + cfg + " --set train.max_steps=2 --set train.batch_size=6", "cd " + dir.string() + " &&")
              .exit_code == 0);
  const auto step_dir = dir / "runs" / "pr" / "checkpoints" / "step-2";
  CHECK(nlohmann::json::parse(read_file(step_dir / "state.json")).at("data_classes") ==
        nlohmann::json({"bird", "cat", "dog"}));
  REQUIRE(run_trainer("export " + step_dir.string() + " --out " + (dir / "m.safetensors").string()).exit_code == 0);
  for (const char* split : {"train", "val"}) fs::rename(dir / split / "bird", dir / split / "zebra");
  const std::string why = " were trained with the class folders [bird, cat, dog]; the training data has [cat, dog, "
                          "zebra] now (first difference: label 0, 'bird' then, 'cat' now)";
  for (const auto& weights : {step_dir, dir / "m.safetensors"}) {
    auto ev = run_trainer("eval " + cfg + " --checkpoint " + weights.string(), "cd " + dir.string() + " &&");
    INFO(ev.output);
    CHECK(ev.exit_code == 1);
    CHECK(ev.output.find("the weights of " + weights.string() + why) != std::string::npos);
    auto pr = run_trainer("predict " + cfg + " --checkpoint " + weights.string() + " --input " + (dir / "val").string(),
                          "cd " + dir.string() + " &&");
    INFO(pr.output);
    CHECK(pr.exit_code == 1);
    CHECK(pr.output.find(why) != std::string::npos);
  }
  auto resumed = run_trainer("run " + cfg + " --set train.max_steps=4 --set train.batch_size=6", "cd " + dir.string() + " &&");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 1);
  CHECK(resumed.output.find(why) != std::string::npos);
}

TEST_CASE("predict refuses inputs that are missing or not images, and wrong labels, naming them", "[e2e]") {
  auto dir = scratch_dir("predict_errors");
  write_class_images(dir / "train", 6, 1);
  write_class_images(dir / "val", 2, 2);
  trainer::test::write_file(dir / "exp.yaml", predict_image_config() + "checkpoint: {every_steps: 2}\n");
  REQUIRE(run_trainer("run " + (dir / "exp.yaml").string() + " --set train.max_steps=2 --set train.batch_size=6")
              .exit_code == 0);
  const std::string base = (dir / "exp.yaml").string() + " --checkpoint " + (dir / "runs" / "pr").string();

  auto missing = run_trainer("predict " + base + " --input " + (dir / "nothere.png").string());
  CHECK(missing.exit_code == 1);
  CHECK(missing.output.find((dir / "nothere.png").string() + ": no such file or folder") != std::string::npos);

  write_file(dir / "notes.png", "these are not pixels");
  auto not_image = run_trainer("predict " + base + " --input " + (dir / "notes.png").string());
  CHECK(not_image.exit_code == 1);
  CHECK(not_image.output.find((dir / "notes.png").string()) != std::string::npos);

  fs::create_directories(dir / "empty");
  auto empty = run_trainer("predict " + base + " --input " + (dir / "empty").string());
  CHECK(empty.exit_code == 1);
  CHECK(empty.output.find((dir / "empty").string() + ": the folder holds no .jpg/.jpeg/.png images") != std::string::npos);

  // a folder with a type trainer does not decode: the rest classified, that one named in a warning
  fs::create_directories(dir / "mixed");
  fs::copy_file(dir / "val" / "cat" / "0.png", dir / "mixed" / "a.png");
  write_file(dir / "mixed" / "b.webp", "RIFF");
  auto mixed = run_trainer("predict " + base + " --input " + (dir / "mixed").string());
  CHECK(mixed.exit_code == 0);
  CHECK(mixed.output.find("1 image file(s) of a type trainer does not decode (JPEG and PNG only) are not classified, "
                          "the first: " + (dir / "mixed" / "b.webp").string()) != std::string::npos);
  CHECK(mixed.output.find((dir / "mixed" / "a.png").string()) != std::string::npos);

  // a file that does not decode: an error by default (the batches before it kept), skipped and named
  // with data.on_bad_sample: skip, the rest classified; nothing that decodes is an error even then
  fs::create_directories(dir / "broken");
  fs::copy_file(dir / "val" / "cat" / "0.png", dir / "broken" / "a.png");
  write_file(dir / "broken" / "b.png", "");
  fs::copy_file(dir / "val" / "dog" / "0.png", dir / "broken" / "c.png");
  auto strict = run_trainer("predict " + base + " --input " + (dir / "broken").string());
  CHECK(strict.exit_code == 1);
  CHECK_THAT(strict.output, Catch::Contains((dir / "broken" / "b.png").string()));
  CHECK_THAT(strict.output, Catch::Contains("(data.on_bad_sample: error; `--set data.on_bad_sample=skip` leaves such "
                                            "images out with a warning and predicts the others)"));
  auto skipping = run_trainer("predict " + base + " --set data.on_bad_sample=skip --input " + (dir / "broken").string());
  INFO(skipping.output);
  CHECK(skipping.exit_code == 0);
  CHECK_THAT(skipping.output, Catch::Contains((dir / "broken" / "b.png").string() + ": "));
  CHECK_THAT(skipping.output, Catch::Contains("1 of 3 images could not be decoded and were skipped"));
  auto skip_lines = json_lines(predict_stdout(base + " --set data.on_bad_sample=skip --input " + (dir / "broken").string()).output);
  REQUIRE(skip_lines.size() == 2);
  CHECK(skip_lines[0].at("path") == (dir / "broken" / "a.png").string());
  CHECK(skip_lines[1].at("path") == (dir / "broken" / "c.png").string());
  fs::remove(dir / "broken" / "a.png");
  fs::remove(dir / "broken" / "c.png");
  auto none = run_trainer("predict " + base + " --set data.on_bad_sample=skip --input " + (dir / "broken").string());
  CHECK(none.exit_code == 1);
  CHECK_THAT(none.output, Catch::Contains("none of the 1 images could be decoded"));

  write_file(dir / "two.txt", "a\nb\n");
  auto labels = run_trainer("predict " + base + " --input " + (dir / "val").string() + " --labels " +
                            (dir / "two.txt").string());
  CHECK(labels.exit_code == 2);
  CHECK(labels.output.find("--labels " + (dir / "two.txt").string() + ": 2 names, but the model has 3 classes") !=
        std::string::npos);

  // a file name that is not UTF-8 still gives a JSON line (the stray byte as U+FFFD)
  const auto odd = dir / "odd\xff.png";
  fs::copy_file(dir / "val" / "cat" / "0.png", odd);
  auto odd_run = predict_stdout(base + " --input '" + odd.string() + "'");
  REQUIRE(odd_run.exit_code == 0);
  auto odd_lines = json_lines(odd_run.output);
  REQUIRE(odd_lines.size() == 1);
  CHECK(odd_lines[0].at("path") == (dir / "odd\xEF\xBF\xBD.png").string());

  auto prompt = run_trainer("predict " + base + " --prompt hello");
  CHECK(prompt.exit_code == 2);
  CHECK(prompt.output.find("--prompt / --prompt-file are for language models") != std::string::npos);

  // an output inside the folder it reads (it emptied the image, then failed on it) or inside the data
  // eval reads (the record replaced a validation image): refused, exit 2, the image whole
  const auto image = dir / "val" / "cat" / "1.png";
  const std::string bytes = trainer::test::read_file(image);
  auto into = run_trainer("predict " + base + " --input " + (dir / "val").string() + " --output " + image.string());
  CHECK(into.exit_code == 2);
  CHECK(into.output.find("--output " + image.string() + ": is inside this command's input folder " +
                         (dir / "val").string()) != std::string::npos);
  // a name predict does not read as an image is fine there (results beside the photos)
  auto beside = run_trainer("predict " + base + " --input " + (dir / "val").string() + " --output " +
                            (dir / "val" / "preds.jsonl").string());
  CHECK(beside.exit_code == 0);
  CHECK(json_lines(trainer::test::read_file(dir / "val" / "preds.jsonl")).size() == 6);  // its 3 x 2 images
  // the config's training folder, which predict opens too (class names, statistics): refused alike
  const auto train_image = dir / "train" / "dog" / "0.png";
  const std::string train_bytes = trainer::test::read_file(train_image);
  auto into_train = run_trainer("predict " + base + " --input " + (dir / "val").string() + " --output " +
                                train_image.string(), "cd " + dir.string() + " &&");
  INFO(into_train.output);
  CHECK(into_train.exit_code == 2);
  CHECK(into_train.output.find("is inside this command's input folder") != std::string::npos);
  CHECK(trainer::test::read_file(train_image) == train_bytes);
  auto eval_into = run_trainer("eval " + base + " --output " + image.string(), "cd " + dir.string() + " &&");
  INFO(eval_into.output);
  CHECK(eval_into.exit_code == 2);
  CHECK(eval_into.output.find("is inside this command's input folder") != std::string::npos);
  CHECK(trainer::test::read_file(image) == bytes);
}

TEST_CASE("sample_token: temperature 0 is the argmax, top-k 1 too, a seed gives the same draws", "[unit]") {
  using namespace trainer::engine;
  const auto logits = torch::tensor({0.1f, 2.0f, -1.0f, 1.5f});
  at::Generator g1 = at::make_generator<at::CPUGeneratorImpl>(7), g2 = at::make_generator<at::CPUGeneratorImpl>(7);
  SamplingOptions greedy;
  greedy.temperature = 0;
  CHECK(sample_token(logits, greedy, g1) == 1);
  SamplingOptions top1;
  top1.top_k = 1;
  for (int i = 0; i < 20; ++i) CHECK(sample_token(logits, top1, g1) == 1);
  SamplingOptions top2;
  top2.top_k = 2;
  std::vector<int64_t> a, b;
  for (int i = 0; i < 50; ++i) {
    a.push_back(sample_token(logits, top2, g1));
    b.push_back(sample_token(logits, top2, g2));
  }
  CHECK(std::set<int64_t>(a.begin(), a.end()) == std::set<int64_t>{1, 3});  // only the two largest
  at::Generator g3 = at::make_generator<at::CPUGeneratorImpl>(7);
  for (int i = 0; i < 20; ++i) sample_token(logits, top1, g3);  // g1 drew 20 top-1 tokens before
  std::vector<int64_t> c;
  for (int i = 0; i < 50; ++i) c.push_back(sample_token(logits, top2, g3));
  CHECK(a == c);
}

TEST_CASE("bytes_to_text keeps UTF-8 and replaces stray bytes and non-byte ids with U+FFFD", "[unit]") {
  using trainer::engine::bytes_to_text;
  CHECK(bytes_to_text({'h', 0xC3, 0xA9, '!'}) == "h\xC3\xA9!");
  CHECK(bytes_to_text({'a', 0xFF, 'b'}) == "a\xEF\xBF\xBD" "b");
  CHECK(bytes_to_text({'a', 0xE2, 0x82}) == "a\xEF\xBF\xBD\xEF\xBF\xBD");  // a cut-off sequence
  CHECK(bytes_to_text({'x', 300, 'y'}) == "x\xEF\xBF\xBD" "y");
}

TEST_CASE("streamed bytes become the same text as the whole, characters never split", "[unit]") {
  const std::vector<int64_t> bytes = {'a', 0xE2, 0x82, 0xAC, 'b', 0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80, 0xE2, 0x82,
                                      'c', 0x80, 300, 0xC3};
  std::ostringstream out;
  trainer::engine::Utf8Stream stream(out);
  std::vector<size_t> sizes;
  for (auto b : bytes) {
    stream.put(b);
    sizes.push_back(out.str().size());
  }
  stream.finish();
  CHECK(out.str() == trainer::engine::bytes_to_text(bytes));
  CHECK(sizes[1] == 1);  // 0xE2 waits for the rest of the euro sign
  CHECK(sizes[2] == 1);
  CHECK(sizes[3] == 4);  // then it is written whole
  CHECK(sizes[13] == out.str().size() - 9);  // a cut-off sequence then 'c': written at once, U+FFFD for the bytes
}

TEST_CASE("a GPT trained on text generates text of its corpus's alphabet, the same for the same seed", "[e2e]") {
  auto dir = scratch_dir("predict_text");
  const std::string alphabet = "abcd \n";
  std::string corpus;
  uint32_t s = 9;
  for (int i = 0; i < 20000; ++i) corpus += alphabet[((s = s * 1664525u + 1013904223u) >> 24) % alphabet.size()];
  write_file(dir / "corpus.txt", corpus);
  train_config(dir, text_config("corpus.txt"));
  const std::string base = "predict " + (dir / "exp.yaml").string() + " --checkpoint " + (dir / "runs" / "tx").string() +
                           " --prompt ab --max-new-tokens 120";
  auto one = run_trainer(base + " --temperature 0.8 --seed 1 2>/dev/null");
  auto again = run_trainer(base + " --temperature 0.8 --seed 1 2>/dev/null");
  auto other = run_trainer(base + " --temperature 0.8 --seed 2 2>/dev/null");
  REQUIRE(one.exit_code == 0);
  REQUIRE(other.exit_code == 0);
  CHECK(one.output == again.output);
  CHECK(one.output != other.output);
  REQUIRE(one.output.size() == 2 + 120 + 1);  // the prompt, 120 one-byte characters, the newline after
  CHECK(one.output.rfind("ab", 0) == 0);
  for (char ch : one.output.substr(0, one.output.size() - 1)) CHECK(alphabet.find(ch) != std::string::npos);
  // greedy decoding does not draw: any seed gives the same text
  auto g1 = run_trainer(base + " --temperature 0 --seed 1 2>/dev/null");
  auto g2 = run_trainer(base + " --temperature 0 --seed 2 2>/dev/null");
  REQUIRE(g1.exit_code == 0);
  CHECK(g1.output == g2.output);
  // the log says how fast
  auto logged = run_trainer("predict " + (dir / "exp.yaml").string() + " --checkpoint " + (dir / "runs" / "tx").string() +
                            " --prompt ab --max-new-tokens 5");
  CHECK(logged.output.find("5 new tokens in ") != std::string::npos);
  CHECK(logged.output.find("tokens/s") != std::string::npos);
  auto threads = run_trainer("predict " + (dir / "exp.yaml").string() + " --checkpoint " + (dir / "runs" / "tx").string() +
                             " --prompt ab --max-new-tokens 5 --threads 1");
  CHECK(threads.output.find("seed 0, 1 threads)") != std::string::npos);
  // an empty prompt starts from a newline, as nanoGPT's sample.py, and says so
  auto empty = run_trainer("predict " + (dir / "exp.yaml").string() + " --checkpoint " + (dir / "runs" / "tx").string() +
                           " --prompt '' --max-new-tokens 5");
  INFO(empty.output);
  REQUIRE(empty.exit_code == 0);
  CHECK(empty.output.find("the prompt is empty: the text starts from a newline") != std::string::npos);

  // streamed: a long generation stopped by SIGTERM has written its text so far, which is what a
  // generation of that many tokens writes; the exit says it is not all (128 + 15)
  const auto out = dir / "long.txt", log = dir / "long.log";
  const pid_t pid = spawn_trainer({"predict", (dir / "exp.yaml").string(), "--checkpoint", (dir / "runs" / "tx").string(),
                                   "--prompt", "ab", "--max-new-tokens", "1000000", "--seed", "4", "--output",
                                   out.string()}, log);
  REQUIRE(wait_for([&] { return read_file(out).size() > 40; }));  // text before the end: streamed
  ::kill(pid, SIGTERM);
  CHECK(wait_pid(pid) == 143);
  const auto partial = read_file(out);
  std::smatch m;
  const auto logged_stop = read_file(log);
  INFO(logged_stop);
  REQUIRE(std::regex_search(logged_stop, m, std::regex(R"(stopped by SIGTERM: (\d+) of 1000000 new tokens written)")));
  CHECK(logged_stop.find("SIGTERM received; stopping after the current batch or token, the output so far kept") !=
        std::string::npos);
  const auto n = std::stoll(m[1]);
  CHECK(partial.size() == 2 + static_cast<size_t>(n) + 1);
  auto same = run_trainer("predict " + (dir / "exp.yaml").string() + " --checkpoint " + (dir / "runs" / "tx").string() +
                          " --prompt ab --seed 4 --max-new-tokens " + std::to_string(n) + " 2>/dev/null");
  CHECK(same.output == partial);
}

TEST_CASE("a token GPT continues a prompt of ids and prints ids", "[e2e]") {
  auto dir = scratch_dir("predict_tokens");
  train_config(dir, tiny_config("tok", 4));
  const std::string base = "predict " + (dir / "exp.yaml").string() + " --checkpoint " + (dir / "runs" / "tok").string();
  auto r = run_trainer(base + " --prompt '1 2, 3' --max-new-tokens 20 --seed 3 2>/dev/null");
  REQUIRE(r.exit_code == 0);
  std::istringstream in(r.output);
  std::vector<int64_t> ids;
  for (int64_t id; in >> id;) ids.push_back(id);
  REQUIRE(ids.size() == 23);
  CHECK(std::vector<int64_t>(ids.begin(), ids.begin() + 3) == std::vector<int64_t>{1, 2, 3});
  for (auto id : ids) CHECK((id >= 0 && id < 64));
  // launched: rank 0 answers once, rank 1 says it has nothing to do
  auto launched = run_trainer("launch -n 2 -- " + base + " --prompt '1 2, 3' --max-new-tokens 20 --seed 3");
  REQUIRE(launched.exit_code == 0);
  CHECK(launched.output.find("[rank0] " + r.output) != std::string::npos);
  CHECK(launched.output.find("rank 1 has nothing to do") != std::string::npos);
  auto bad = run_trainer(base + " --prompt 'one 2'");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("token ids in [0, 64) separated by spaces or commas; got 'one'") != std::string::npos);
  auto images = run_trainer(base + " --input " + dir.string());
  CHECK(images.exit_code == 2);
  CHECK(images.output.find("--input is for image models") != std::string::npos);
}

// A run directory inside the image folder it trains on became a class of its own to the next run and
// broke the data for every later command. Refused before anything is created, exit 2.
TEST_CASE("run refuses a run directory inside its image folder", "[e2e]") {
  auto dir = scratch_dir("out_dir_in_data");
  write_class_images(dir / "train", 2, 1);
  write_class_images(dir / "val", 1, 2);
  trainer::test::write_file(dir / "exp.yaml", predict_image_config());
  auto r = run_trainer("run " + (dir / "exp.yaml").string() + " --set run.out_dir=" + (dir / "train" / "runs").string(),
                       "cd " + dir.string() + " &&");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("run.out_dir: the run directory " + (dir / "train" / "runs" / "pr").string() +
                      " would be inside the data folder " + (dir / "train").string()) != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "train" / "runs"));
}
