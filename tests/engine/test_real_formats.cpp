// The three real data formats feed the models through the loader, end to end through `trainer run`:
// Debian's Fashion-MNIST (idx), a text file (byte-level GPT) and a JPEG folder the test writes. Each
// run must learn: loss down from its first logged value and a validation metric far from chance.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>

#include "ckpt/ckpt_runs.hpp"
#include "data/image_decode.hpp"
#include "test_util.hpp"
#include "skip.hpp"

using trainer::test::run_trainer;
using trainer::test::scratch_dir;
using trainer::test::write_file;

namespace {

namespace fs = std::filesystem;

struct Metrics {
  std::vector<nlohmann::json> train, eval;
};

// Runs `yaml` (written to DIR/exp.yaml) and returns its metrics; REQUIREs a clean exit.
Metrics train(const fs::path& dir, const std::string& yaml) {
  write_file(dir / "exp.yaml", yaml);
  auto r = run_trainer("run " + (dir / "exp.yaml").string() + " --out-dir " + (dir / "runs").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  Metrics m{trainer::test::records(dir / "runs/exp/metrics.jsonl", "train"),
            trainer::test::records(dir / "runs/exp/metrics.jsonl", "eval")};
  REQUIRE(m.train.size() >= 2);
  REQUIRE_FALSE(m.eval.empty());
  return m;
}

// Three classes a small CNN separates only by looking at the pixels: horizontal stripes, vertical
// stripes, and a bright disc, each with a random phase / position and per-pixel noise.
std::vector<uint8_t> pattern_image(int cls, int h, int w, std::mt19937& rng) {
  std::uniform_int_distribution<int> phase(0, 7), noise(-30, 30), pos(8, 23);
  std::vector<uint8_t> px(static_cast<size_t>(h * w * 3));
  const int p = phase(rng), cy = pos(rng), cx = pos(rng);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      int v = 0;
      if (cls == 0) v = ((y + p) / 4) % 2 ? 220 : 40;
      if (cls == 1) v = ((x + p) / 4) % 2 ? 220 : 40;
      if (cls == 2) v = (y - cy) * (y - cy) + (x - cx) * (x - cx) < 49 ? 230 : 50;
      for (int c = 0; c < 3; ++c) px[(y * w + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v + noise(rng), 0, 255));
    }
  return px;
}

void write_pattern_folder(const fs::path& root, int per_class, unsigned seed) {
  std::mt19937 rng(seed);
  const char* names[] = {"hstripes", "vstripes", "disc"};
  for (int cls = 0; cls < 3; ++cls) {
    fs::create_directories(root / names[cls]);
    for (int k = 0; k < per_class; ++k) {
      auto px = pattern_image(cls, 40, 40, rng);
      trainer::data::write_jpeg((root / names[cls] / ("img_" + std::to_string(k) + ".jpg")).string(), px.data(), 40,
                                40, 3, 90);
    }
  }
}

// Text with structure a byte-level model picks up quickly: sentences from a small grammar.
std::string generated_text(size_t bytes) {
  const char* subj[] = {"the cat", "a dog", "my friend", "the old man", "every child"};
  const char* verb[] = {"sees", "likes", "finds", "carries", "draws"};
  const char* obj[] = {"a red ball", "the blue door", "some bread", "a small boat", "the garden"};
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> pick(0, 4);
  std::string s;
  while (s.size() < bytes) s += std::string(subj[pick(rng)]) + " " + verb[pick(rng)] + " " + obj[pick(rng)] + ".\n";
  return s;
}

}  // namespace

TEST_CASE("Fashion-MNIST from the Debian package trains a ResNet through the idx loader", "[e2e][data]") {
  const fs::path fmnist = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(fmnist / "train-images-idx3-ubyte.gz")) {
    TRAINER_SKIP("Debian's dataset-fashion-mnist is not installed at " << fmnist);
  }
  auto dir = scratch_dir("real_fmnist");
  auto m = train(dir, R"(run: {name: exp, seed: 0}
model: {arch: resnet, depth: 8, width: 0.5, in_channels: 1, num_classes: 10}
data:
  format: idx
  path: /usr/share/datasets/fashion-mnist
  workers: 2
  augment: {crop_padding: 2, hflip: true}
  normalize: {mode: mean_std}
train: {batch_size: 64, max_steps: 100, log_every: 20, eval_steps: 8, device: cpu, threads: 1}
optim: {name: sgd, lr: 0.1, momentum: 0.9}
schedule: {name: cosine, warmup_steps: 10}
log: {progress: off}
)");
  // The learning rate decays to 0 at the last step. At a constant lr 0.1 with momentum the weights
  // still move fast at step 100 and BatchNorm's running statistics (the last ~10 batches) lag them:
  // evaluated every 20 steps, one run's val accuracy went 0.50, 0.35, 0.69, 0.38, so float rounding
  // (AVX2 instead of AVX-512 kernels) picked any point of that swing, while the train losses of both
  // stayed within 0.04. Annealed, the end is settled: 0.67 with AVX-512, 0.66 with AVX2 kernels
  // (ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2) on one machine.
  const double first = m.train.front().at("loss"), last = m.train.back().at("loss");
  const double acc = m.eval.back().at("accuracy"), val_loss = m.eval.back().at("loss");
  INFO("loss " << first << " -> " << last << ", val loss " << val_loss << ", val accuracy " << acc);
  CHECK(first > 1.5);  // ~ln 10 = 2.30 at the start
  CHECK(last < first - 0.6);
  CHECK(val_loss < std::log(10.0) / 2);  // half a uniform guess's loss
  CHECK(acc > 0.5);  // 10 classes: chance is 0.10
  CHECK(m.eval.back().at("count") == 8 * 64);  // eval_steps batches of the 10,000 test images
}

TEST_CASE("a text file trains a byte-level GPT through the text loader", "[e2e][data]") {
  auto dir = scratch_dir("real_text");
  write_file(dir / "corpus.txt", generated_text(60000));
  auto m = train(dir, "run: {name: exp, seed: 0}\n"
                      "model: {arch: gpt, vocab_size: 256, block_size: 32, n_layer: 2, n_head: 2, n_embd: 64}\n"
                      "data: {format: text, path: " + (dir / "corpus.txt").string() + ", val_fraction: 0.1, workers: 2}\n"
                      "train: {batch_size: 16, max_steps: 80, log_every: 10, eval_steps: 8, device: cpu, threads: 1}\n"
                      "optim: {name: adamw, lr: 0.003, weight_decay: 0.01}\n"
                      "log: {progress: off}\n");
  const double first = m.train.front().at("loss"), last = m.train.back().at("loss");
  const double bpb = m.eval.back().at("bpb");
  INFO("loss " << first << " -> " << last << ", val bpb " << bpb);
  CHECK(first > 3.0);  // ln 256 = 5.55 untrained
  CHECK(last < 2.6);
  // bits per byte = loss / ln 2 for byte tokens; a uniform guess costs 8 bits
  CHECK(bpb == Approx(m.eval.back().at("loss").get<double>() / std::log(2.0)).epsilon(1e-6));
  CHECK(bpb < 3.8);
}

TEST_CASE("a JPEG folder trains a ResNet through the image_folder loader", "[e2e][data]") {
  auto dir = scratch_dir("real_jpeg");
  write_pattern_folder(dir / "train", 40, 1);
  write_pattern_folder(dir / "val", 12, 2);
  auto m = train(dir, "run: {name: exp, seed: 0}\n"
                      "model: {arch: resnet, depth: 8, width: 0.5, in_channels: 3, num_classes: 3}\n"
                      "data: {format: image_folder, path: " + (dir / "train").string() + ", val_path: " +
                      (dir / "val").string() + ", image_size: 32, workers: 2, augment: {hflip: true}}\n"
                      "train: {batch_size: 24, max_steps: 40, log_every: 10, device: cpu, threads: 1}\n"
                      "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
                      "log: {progress: off}\n");
  const double first = m.train.front().at("loss"), last = m.train.back().at("loss");
  const double acc = m.eval.back().at("accuracy");
  INFO("loss " << first << " -> " << last << ", val accuracy " << acc);
  CHECK(last < first);
  CHECK(acc > 0.85);  // 3 classes: chance is 0.33
  CHECK(m.eval.back().at("count") == 36);  // the whole val folder
}
