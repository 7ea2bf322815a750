// Bad configs: each case asserts the exact FILE:LINE:COL, key path and message.
#include <catch2/catch.hpp>

#include "config/load.hpp"
#include "test_util.hpp"

using namespace trainer::config;

namespace {

// Loads `yaml` from a real file (so paths and line numbers are those a user sees) and returns the
// diagnostics as printed, one per line. Empty when the config is valid.
std::vector<std::string> errors_of(const std::string& yaml, const std::vector<std::string>& overrides = {},
                                   ValidateOptions opts = {}) {
  auto dir = trainer::test::scratch_dir("config_errors");
  auto file = dir / "exp.yaml";
  trainer::test::write_file(file, yaml);
  std::vector<std::string> out;
  try {
    load_and_validate(file.string(), overrides, opts);
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) {
      std::string s = d.str();
      auto p = s.find("exp.yaml");  // strip the scratch folder: "exp.yaml:3:5: ..."
      out.push_back(p == std::string::npos ? s : s.substr(p));
    }
  }
  return out;
}

const std::string kValidHead = "train:\n  max_steps: 10\ndata:\n  format: synthetic\n";

}  // namespace

TEST_CASE("a typo'd key names file:line:col, the key path and the closest key", "[unit]") {
  auto e = errors_of(kValidHead + "optim:\n  lr_rate: 0.1\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:6:3: optim.lr_rate: unknown key, did you mean 'optim.lr'?"});
}

TEST_CASE("an unknown section suggests the closest section", "[unit]") {
  auto e = errors_of(kValidHead + "optimizer:\n  lr: 0.1\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:5:1: optimizer: unknown section, did you mean 'optim'?"});
}

TEST_CASE("an unknown section far from any name lists the sections", "[unit]") {
  auto e = errors_of(kValidHead + "zzz: 1\n");
  REQUIRE(e.size() == 1);
  REQUIRE(e[0] ==
          "exp.yaml:5:1: zzz: unknown section; sections are: run model data train optim schedule dist checkpoint log profile");
}

TEST_CASE("YAML syntax errors give the parser's position", "[unit]") {
  auto e = errors_of("train:\n  max_steps: [1, 2\n");
  REQUIRE(e.size() == 1);
  REQUIRE(e[0].rfind("exp.yaml:3:1: YAML syntax error: ", 0) == 0);
}

TEST_CASE("a wrong type names the expected type and the value", "[unit]") {
  auto e = errors_of("train:\n  max_steps: 10\n  batch_size: abc\ndata:\n  format: synthetic\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:3:15: train.batch_size: expected an integer or auto, got 'abc'"});
  e = errors_of("train:\n  max_steps: 10\n  log_every: auto\ndata:\n  format: synthetic\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:3:14: train.log_every: expected an integer, got 'auto'"});
}

// A path holding a NUL ("\0" in a double-quoted YAML string): the system would read it up to the NUL,
// another path ("a.yaml\0evil" loaded a.yaml; a run.out_dir was taken for another key's folder).
TEST_CASE("a path with a NUL character is refused at its key, base: too", "[unit]") {
  auto e = errors_of(kValidHead + "run:\n  out_dir: \"runs\\0/x\"\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:6:12: run.out_dir: 'runs\\x00/x' holds a NUL character, which no path can hold");
  e = errors_of("base: \"other.yaml\\0evil\"\n" + kValidHead);
  REQUIRE(e.size() == 1);
  CHECK_THAT(e[0], Catch::Matchers::Contains("base: 'other.yaml\\x00evil' holds a NUL character"));
}

TEST_CASE("train.batch_size auto needs global_batch_size, divisible by the ranks, and no grad_accum", "[unit]") {
  auto e = errors_of("train:\n  max_steps: 10\n  batch_size: auto\ndata:\n  format: synthetic\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:3:3: train.batch_size: auto picks the micro-batch that fits and "
                                        "keeps train.global_batch_size by accumulation: set train.global_batch_size"});
  ValidateOptions two;
  two.world_size = 2;
  e = errors_of("train:\n  max_steps: 10\n  batch_size: auto\n  global_batch_size: 33\n  grad_accum: 2\n"
                "data:\n  format: synthetic\n", {}, two);
  REQUIRE(e == std::vector<std::string>{
                   "exp.yaml:4:3: train.global_batch_size: 33 is not divisible by the world size 2 (train.batch_size auto)",
                   "exp.yaml:5:3: train.grad_accum: is derived when train.batch_size is auto: remove it"});
  CHECK(errors_of("train:\n  max_steps: 10\n  global_batch_size: 64\ndata:\n  format: synthetic\n",
                  {"train.batch_size=auto"}, two).empty());
}

TEST_CASE("a boolean key rejects a number", "[unit]") {
  auto e = errors_of(kValidHead + "run:\n  deterministic: 3\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:6:18: run.deterministic: expected true or false, got '3'"});
}

TEST_CASE("an out-of-range value gives the range", "[unit]") {
  auto e = errors_of(kValidHead + "optim:\n  momentum: 1.5\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:6:13: optim.momentum: value 1.5 is out of range [0, 0.9999]"});
}

TEST_CASE("a negative batch size is out of range", "[unit]") {
  auto e = errors_of("train:\n  max_steps: 10\n  batch_size: -4\ndata:\n  format: synthetic\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:3:15: train.batch_size: value -4 is out of range [1, 1e+07] (or auto)"});
}

TEST_CASE("a choice outside the list suggests the closest choice", "[unit]") {
  auto e = errors_of(kValidHead + "optim:\n  name: adam\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:6:9: optim.name: 'adam' is not one of sgd | adamw; did you mean 'adamw'?"});
}

TEST_CASE("a duplicate key points at the second occurrence and the first line", "[unit]") {
  auto e = errors_of(kValidHead + "optim:\n  lr: 0.1\n  lr: 0.2\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:7:3: optim.lr: duplicate key (first set at line 6)"});
  // inside a list item and a mapping of a list key too: the later value won in silence (a group's
  // second `match` lost the group's first pattern)
  e = errors_of(kValidHead + "optim:\n  groups:\n    - {match: '^fc', lr: 0.5, lr: 0.001, match: '^conv1'}\n");
  REQUIRE(e.size() == 2);
  CHECK(e[0] == "exp.yaml:7:31: optim.groups: duplicate key 'lr' (first set at line 7)");
  CHECK(e[1] == "exp.yaml:7:42: optim.groups: duplicate key 'match' (first set at line 7)");
  e = errors_of(kValidHead + "model:\n  init:\n    rename:\n      a.: b.\n      a.: c.\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:9:7: model.init.rename: duplicate key 'a.' (first set at line 8)");
}

// Keys of an option the config does not use were ignored in silence: a warning at their line (not an
// error: a sweep over optim.name=sgd,adamw sets momentum for its sgd points).
TEST_CASE("keys of an optimizer or a data format not in use have no effect: a warning at their line", "[unit]") {
  auto warnings_of = [](const std::string& yaml) {
    auto dir = trainer::test::scratch_dir("config_unused");
    trainer::test::write_file(dir / "exp.yaml", yaml);
    std::vector<std::string> out;
    for (const auto& w : load_and_validate((dir / "exp.yaml").string(), {}, {}).warnings) {
      const auto s = w.str();
      out.push_back(s.substr(s.find("exp.yaml")));
    }
    return out;
  };
  auto w = warnings_of(kValidHead + "optim:\n  name: adamw\n  momentum: 0.5\n  nesterov: true\n");
  REQUIRE(w.size() == 2);
  CHECK(w[0] == "exp.yaml:7:3: optim.momentum: has no effect with optim.name adamw (they are sgd's): ignored");
  CHECK(w[1] == "exp.yaml:8:3: optim.nesterov: has no effect with optim.name adamw (they are sgd's): ignored");
  w = warnings_of(kValidHead + "optim:\n  betas: [0.8, 0.9]\n");
  REQUIRE(w == std::vector<std::string>{"exp.yaml:6:3: optim.betas: has no effect with optim.name sgd (they are "
                                        "adamw's): ignored"});
  w = warnings_of("train:\n  max_steps: 10\ndata:\n  format: synthetic\n  path: /data/x\n  val_fraction: 0.2\n");
  REQUIRE(w.size() == 2);
  CHECK(w[0] == "exp.yaml:5:3: data.path: has no effect with data.format synthetic (its data is generated): ignored");
  w = warnings_of("train:\n  max_steps: 10\ndata:\n  format: image_folder\n  path: /x\n  val_fraction: 0.5\n"
                  "  synthetic: {num_samples: 10}\n");
  REQUIRE(w.size() == 2);
  CHECK(w[0] == "exp.yaml:7:15: data.synthetic.num_samples: has no effect with data.format image_folder "
                "(data.synthetic is the synthetic format's): ignored");
  CHECK(w[1] == "exp.yaml:6:3: data.val_fraction: has no effect with data.format image_folder (text and tokens split "
                "a tail off; set data.val_path): ignored");
  // evaluation settings without a validation split: nothing evaluated, early stopping never on, in silence
  w = warnings_of("train:\n  max_steps: 10\n  eval_every: 5\n  early_stopping: {metric: accuracy}\ndata:\n  "
                  "format: synthetic\n  synthetic: {val_samples: 0}\n");
  REQUIRE(w.size() == 2);
  CHECK(w[0] == "exp.yaml:3:3: train.eval_every: has no effect with data.synthetic.val_samples 0 (no validation "
                "split: nothing is evaluated, nothing stops early): ignored");
  CHECK(w[1].find("train.early_stopping.metric: has no effect with data.synthetic.val_samples 0") != std::string::npos);
  // a profile window past the run's end recorded nothing, in silence
  w = warnings_of(kValidHead + "profile:\n  steps: 5\n  start_step: 7\n");
  REQUIRE(w == std::vector<std::string>{"exp.yaml:6:3: profile.steps: records steps 8..10 only: the run ends at step 10"});
  w = warnings_of("train:\n  max_steps: 8\ndata:\n  format: synthetic\nprofile:\n  steps: 5\n");
  REQUIRE(w == std::vector<std::string>{"exp.yaml:6:3: profile.steps: the window starts after step 10, but the run "
                                        "has 8 steps: nothing is recorded (lower profile.start_step)"});
  // a base's SGD momentum under a config that picks adamw: the base's choice, not this config's mistake
  auto dir = trainer::test::scratch_dir("config_unused_base");
  trainer::test::write_file(dir / "b.yaml", kValidHead + "optim:\n  name: sgd\n  momentum: 0.5\n");
  trainer::test::write_file(dir / "exp.yaml", "base: b.yaml\noptim:\n  name: adamw\n");
  CHECK(load_and_validate((dir / "exp.yaml").string(), {}, {}).warnings.empty());
}

TEST_CASE("max_steps and epochs together are a contradiction", "[unit]") {
  auto e = errors_of("data:\n  format: synthetic\ntrain:\n  max_steps: 10\n  epochs: 2\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:5:3: train.epochs: set either train.max_steps or train.epochs, not both"});
}

TEST_CASE("neither max_steps nor epochs is an error", "[unit]") {
  auto e = errors_of("data:\n  format: synthetic\n");
  REQUIRE(e.size() == 1);
  REQUIRE(e[0].find("train.max_steps: set train.max_steps or train.epochs (both are 0)") != std::string::npos);
}

TEST_CASE("gpt with image data is refused", "[unit]") {
  auto e = errors_of("model:\n  arch: gpt\ndata:\n  format: idx\n  path: /nonexistent\ntrain:\n  max_steps: 1\n");
  REQUIRE(e == std::vector<std::string>{
                   "exp.yaml:4:3: data.format: 'idx' gives images, but model.arch 'gpt' takes tokens (use text, tokens or synthetic)"});
}

TEST_CASE("resnet with token data is refused", "[unit]") {
  auto e = errors_of("data:\n  format: tokens\n  path: x.bin\ntrain:\n  max_steps: 1\n");
  REQUIRE(e == std::vector<std::string>{
                   "exp.yaml:2:3: data.format: 'tokens' gives tokens, but model.arch 'resnet' takes images (use idx, cifar, image_folder or synthetic)"});
}

TEST_CASE("a key of the other architecture is refused", "[unit]") {
  auto e = errors_of(kValidHead + "model:\n  arch: gpt\n  depth: 50\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:7:3: model.depth: applies to model.arch 'resnet', but model.arch is 'gpt'"});
}

TEST_CASE("an unknown arch lists the known ones", "[unit]") {
  auto e = errors_of(kValidHead + "model:\n  arch: gtp\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:6:3: model.arch: unknown arch 'gtp'; known: convnet, gpt, resnet, vit (did you mean 'gpt'?)"});
}

TEST_CASE("global_batch_size must divide by batch_size x world size", "[unit]") {
  ValidateOptions two_ranks;
  two_ranks.world_size = 2;
  auto e = errors_of("data:\n  format: synthetic\ntrain:\n  max_steps: 1\n  batch_size: 32\n  global_batch_size: 96\n", {},
                     two_ranks);
  REQUIRE(e == std::vector<std::string>{
                   "exp.yaml:6:3: train.global_batch_size: 96 is not divisible by batch_size x world size = 32 x 2"});
}

TEST_CASE("fp16 on a CPU run says why", "[unit]") {
  auto e = errors_of("data:\n  format: synthetic\ntrain:\n  max_steps: 1\n  precision: fp16\n");
  REQUIRE(e == std::vector<std::string>{
                   "exp.yaml:5:3: train.precision: fp16 needs CUDA (dynamic loss scaling on GPU); on CPU use bf16 or fp32"});
}

TEST_CASE("n_embd must divide by n_head", "[unit]") {
  auto e = errors_of("model:\n  arch: gpt\n  n_embd: 100\n  n_head: 3\ndata:\n  format: synthetic\ntrain:\n  max_steps: 1\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:4:3: model.n_head: n_embd 100 is not divisible by n_head 3"});
}

TEST_CASE("a ResNet depth that is no known layout is refused", "[unit]") {
  auto e = errors_of(kValidHead + "model:\n  depth: 19\n");
  REQUIRE(e.size() == 1);
  REQUIRE(e[0].rfind("exp.yaml:6:3: model.depth: 19 is not a ResNet depth", 0) == 0);
}

TEST_CASE("a missing data path is an error for file formats", "[unit]") {
  auto e = errors_of("data:\n  format: idx\ntrain:\n  max_steps: 1\n");
  REQUIRE(e.size() == 1);
  REQUIRE(e[0].find("data.path: required for data.format 'idx'") != std::string::npos);
}

TEST_CASE("normalize mean and std must have the same length", "[unit]") {
  auto e = errors_of(kValidHead + "  normalize:\n    mean: [0.5, 0.5, 0.5]\n    std: [0.2]\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:7:5: data.normalize.std: has 1 values but data.normalize.mean has 3"});
}

TEST_CASE("a list key rejects a scalar", "[unit]") {
  auto e = errors_of(kValidHead + "optim:\n  betas: 0.9\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:6:10: optim.betas: expected a list of numbers such as [0.5, 0.5], got '0.9'"});
}

TEST_CASE("a section given a scalar is refused", "[unit]") {
  auto e = errors_of(kValidHead + "optim: 3\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:5:8: optim: expected a mapping of keys under 'optim'"});
}

TEST_CASE("every error is reported in one pass", "[unit]") {
  auto e = errors_of("optim:\n  lr_rate: 0.1\n  name: adam\ntrain:\n  batch_size: abc\n  max_steps: 5\n  epochs: 1\n"
                     "data:\n  format: synthetic\n");
  REQUIRE(e.size() == 4);
  CHECK(e[0] == "exp.yaml:2:3: optim.lr_rate: unknown key, did you mean 'optim.lr'?");
  CHECK(e[1] == "exp.yaml:3:9: optim.name: 'adam' is not one of sgd | adamw; did you mean 'adamw'?");
  CHECK(e[2] == "exp.yaml:5:15: train.batch_size: expected an integer or auto, got 'abc'");
  CHECK(e[3] == "exp.yaml:7:3: train.epochs: set either train.max_steps or train.epochs, not both");
}

TEST_CASE("an override naming an unknown key is an error", "[unit]") {
  auto e = errors_of(kValidHead, {"optim.lr_rate=0.1"});
  REQUIRE(e == std::vector<std::string>{"--set optim.lr_rate=0.1: optim.lr_rate: unknown key, did you mean 'optim.lr'?"});
}

TEST_CASE("an override naming a section says to set its keys one at a time, listing them", "[unit]") {
  auto e = errors_of(kValidHead, {"train.ema={decay: 0.999, eval: true}"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].rfind("--set train.ema={decay: 0.999, eval: true}: train.ema: is a section, not a key: --set takes one "
                   "key at a time (--set train.ema.KEY=VALUE; its keys: decay, every, eval", 0) == 0);
}

TEST_CASE("a key set twice on the command line: the later value wins, with a warning naming both", "[unit]") {
  auto dir = trainer::test::scratch_dir("config_set_twice");
  trainer::test::write_file(dir / "exp.yaml", kValidHead);
  auto warnings = [&](const std::vector<std::string>& overrides, double* lr) {
    const auto loaded = load_and_validate((dir / "exp.yaml").string(), overrides, ValidateOptions{});
    *lr = loaded.cfg.optim.lr;
    std::vector<std::string> out;
    for (const auto& w : loaded.warnings)
      if (w.key == "optim.lr") out.push_back(w.str());
    return out;
  };
  double lr = 0;
  CHECK(warnings({"optim.lr=0.1", "optim.lr=0.2"}, &lr) ==
        std::vector<std::string>{"--set optim.lr=0.2: optim.lr: is set twice on the command line (first by --set "
                                 "optim.lr=0.1): the later value is used"});
  CHECK(lr == 0.2);
  CHECK(warnings({"optim.lr=0.1", "run.seed=3", "optim.lr=0.3", "optim.lr=0.4"}, &lr).size() == 2);
  CHECK(lr == 0.4);
  CHECK(warnings({"optim.lr=0.1", "optim.momentum=0.5"}, &lr).empty());
  CHECK(errors_of(kValidHead, {"optim.lr=0.1", "optim.lr=0.2"}).empty());
}

TEST_CASE("an override without '=' is an error", "[unit]") {
  auto e = errors_of(kValidHead, {"optim.lr"});
  REQUIRE(e == std::vector<std::string>{"--set optim.lr: expected KEY=VALUE"});
}

TEST_CASE("an override with a value of the wrong type is an error", "[unit]") {
  auto e = errors_of(kValidHead, {"train.max_steps=ten"});
  REQUIRE(e == std::vector<std::string>{"--set train.max_steps=ten: train.max_steps: expected an integer, got 'ten'"});
}

TEST_CASE("a missing config file is reported by name", "[unit]") {
  try {
    load_config("/nonexistent/exp.yaml");
    FAIL("no error");
  } catch (const ConfigError& e) {
    REQUIRE(std::string(e.what()) == "/nonexistent/exp.yaml: config file not found");
  }
}

// --- model.arch vit -----------------------------------------------------------------------------------

namespace {
const std::string kVitHead = "train:\n  max_steps: 10\ndata:\n  format: synthetic\n  synthetic:\n    image_size: 16\n"
                             "model:\n  arch: vit\n  image_size: 16\n";
}  // namespace

TEST_CASE("a vit config with whole patches and heads that divide the width is valid", "[unit]") {
  CHECK(errors_of(kVitHead + "  patch_size: 4\n  hidden_dim: 32\n  num_heads: 4\n  in_channels: 1\n").empty());
}

TEST_CASE("vit: the patch must divide the image and the heads the width", "[unit]") {
  auto e = errors_of(kVitHead + "  patch_size: 5\n  hidden_dim: 30\n  num_heads: 4\n");
  REQUIRE(e == std::vector<std::string>{
                   "exp.yaml:10:3: model.patch_size: 5 does not divide model.image_size 16 (the image is cut into whole patches)",
                   "exp.yaml:12:3: model.num_heads: hidden_dim 30 is not divisible by num_heads 4"});
}

TEST_CASE("vit takes images: token data is refused", "[unit]") {
  auto e = errors_of("train:\n  max_steps: 1\ndata:\n  format: text\n  path: x.txt\nmodel:\n  arch: vit\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:4:3: data.format: 'text' gives tokens, but model.arch 'vit' takes images "
                                        "(use idx, cifar, image_folder or synthetic)"});
}

TEST_CASE("vit: images of another size than model.image_size are refused before anything starts", "[unit]") {
  auto e = errors_of(kVitHead + "  patch_size: 4\n", {"data.synthetic.image_size=32"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].find("data.synthetic.image_size: data.synthetic.image_size makes 32x32 images, but model.arch 'vit' takes "
                  "model.image_size 16x16 images") != std::string::npos);
  e = errors_of(kVitHead + "  patch_size: 4\n", {"data.image_size=28"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].find("data.image_size: data.image_size resizes to 28x28 images, but model.arch 'vit' takes "
                  "model.image_size 16x16 images") != std::string::npos);
  e = errors_of("train:\n  max_steps: 1\ndata:\n  format: cifar\n  path: c\nmodel:\n  arch: vit\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:4:3: data.format: data.format 'cifar' gives 32x32 images, but model.arch "
                                        "'vit' takes model.image_size 224x224 images (set data.image_size: 224 to resize)"});
  e = errors_of("train:\n  max_steps: 1\ndata:\n  format: synthetic\nmodel:\n  arch: vit\n  image_size: 64\n  patch_size: 8\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:7:3: model.image_size: data.synthetic.image_size makes 32x32 images, but "
                                        "model.arch 'vit' takes model.image_size 64x64 images"});
}

TEST_CASE("convnet: images smaller than its pooling takes are refused before anything starts", "[unit]") {
  const std::string head = "train:\n  max_steps: 10\ndata:\n  format: synthetic\n  synthetic:\n    image_size: 7\n"
                           "model:\n  arch: convnet\n";
  REQUIRE(errors_of(head) == std::vector<std::string>{
                                 "exp.yaml:6:5: data.synthetic.image_size: data.synthetic.image_size makes 7x7 images, but "
                                 "model.arch 'convnet' takes images of at least 8x8 with these model settings"});
  CHECK(errors_of(head, {"data.synthetic.image_size=8"}).empty());
  // the unpadded k x k whitening conv takes k - 1 pixels more
  auto e = errors_of(head, {"data.image_size=10", "model.whiten=4"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].find("data.image_size: data.image_size resizes to 10x10 images, but model.arch 'convnet' takes images of "
                  "at least 11x11 with these model settings") != std::string::npos);
  CHECK(errors_of(head, {"data.image_size=11", "model.whiten=4"}).empty());
}

TEST_CASE("keys of vit are refused for other archs, and keys shared with vit name every arch", "[unit]") {
  auto e = errors_of(kValidHead + "model:\n  patch_size: 4\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:6:3: model.patch_size: applies to model.arch 'vit', but model.arch is 'resnet'"});
  e = errors_of(kValidHead + "model:\n  arch: gpt\n  in_channels: 1\n");
  REQUIRE(e == std::vector<std::string>{
                   "exp.yaml:7:3: model.in_channels: applies to model.arch 'convnet, resnet, vit', but model.arch is 'gpt'"});
  CHECK(errors_of(kVitHead + "  patch_size: 4\n  dropout: 0.1\n  num_classes: 3\n").empty());
}

TEST_CASE("vit reports classification metrics, not language-model ones", "[unit]") {
  auto e = errors_of(kVitHead + "  patch_size: 4\n", {"train.early_stopping.metric=bpb"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].find("train.early_stopping.metric: 'bpb' is not reported for model.arch 'vit'") != std::string::npos);
  CHECK(errors_of(kVitHead + "  patch_size: 4\n", {"train.early_stopping.metric=accuracy"}).empty());
}

TEST_CASE("train.eval_tta flip is for image models: a GPT is refused naming the key, other values too", "[unit]") {
  auto e = errors_of("train:\n  max_steps: 10\n  eval_tta: flip\ndata:\n  format: synthetic\nmodel:\n  arch: gpt\n");
  REQUIRE(e == std::vector<std::string>{
                   "exp.yaml:3:3: train.eval_tta: flip mirrors images; model.arch 'gpt' takes tokens (use none)"});
  CHECK(errors_of(kValidHead, {"train.eval_tta=flip"}).empty());  // resnet
  e = errors_of(kValidHead, {"train.eval_tta=rotate"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].find("train.eval_tta") != std::string::npos);
}

TEST_CASE("dist.recovery in_process is refused where it cannot hold, naming the key", "[unit]") {
  const std::string head = kValidHead + "dist:\n  recovery: in_process\n";
  CHECK(errors_of(head).empty());
  auto e = errors_of(head + "  sharding: optimizer\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:6:3: dist.recovery: in_process works with dist.sharding: none only (a dead rank's shard of "
                "the state would be lost)");
  e = errors_of(head + "  store: file:///shared/rdzv\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0].find("dist.recovery: in_process needs the store `trainer launch` hosts") != std::string::npos);
  e = errors_of(head, {"dist.recovery=sometimes"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].find("dist.recovery") != std::string::npos);
  CHECK(e[0].find("'sometimes' is not one of restart | in_process") != std::string::npos);
}

TEST_CASE("a YAML merge key is refused as unsupported, not as a typo", "[unit]") {
  auto e = errors_of(kValidHead + "optim:\n  <<: {lr: 0.1}\n  weight_decay: 0.1\n");
  REQUIRE(e == std::vector<std::string>{
                   "exp.yaml:6:3: optim.<<: YAML merge keys (<<) are not supported: write the keys out, or put the "
                   "shared ones in a file named by a top-level `base:` (docs/CONFIG.md)"});
}

TEST_CASE("a number key reads an integer in every form YAML writes one, as the integer keys do", "[unit]") {
  auto dir = trainer::test::scratch_dir("config_hex_float");
  trainer::test::write_file(dir / "exp.yaml", kValidHead + "optim:\n  lr: 0x2\n  weight_decay: 1\n");
  const auto loaded = load_and_validate((dir / "exp.yaml").string(), {}, {});
  CHECK(loaded.cfg.optim.lr == 2.0);
  CHECK(loaded.cfg.optim.weight_decay == 1.0);
  auto e = errors_of(kValidHead + "optim:\n  lr: 0x1g\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:6:7: optim.lr: expected a number, got '0x1g'"});
}

TEST_CASE("a key written without its section is pointed to its full name", "[unit]") {
  auto e = errors_of(kValidHead + "lr: 0.1\n");
  REQUIRE(e == std::vector<std::string>{"exp.yaml:5:1: lr: unknown section, did you mean 'optim.lr'?"});
}

TEST_CASE("a YAML syntax error on a line holding a tab says YAML indents with spaces", "[unit]") {
  auto e = errors_of("train:\n\tmax_steps: 10\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0].find("YAML syntax error: ") != std::string::npos);
  CHECK(e[0].find("(the line holds a tab: YAML indents with spaces only)") != std::string::npos);
}

TEST_CASE("EMA switched off by --set after the file set its keys is not a mistake, the keys written with it are",
          "[unit]") {
  const std::string file = "train:\n  max_steps: 10\n  ema: {decay: 0.99, every: 2}\ndata:\n  format: synthetic\n";
  CHECK(errors_of(file, {"train.ema.decay=0"}).empty());
  auto e = errors_of(file, {"train.ema.decay=0", "train.ema.warmup=true"});
  REQUIRE(e.size() == 1);
  CHECK(e[0].find("train.ema.warmup: has no effect: train.ema.decay is 0 (EMA off)") != std::string::npos);
}
