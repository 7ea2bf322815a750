// The training recipes' config errors (config/validate_recipes.cpp): exact position, key and message.
#include <catch2/catch.hpp>

#include "config/load.hpp"
#include "test_util.hpp"

using namespace trainer::config;

namespace {

std::vector<std::string> recipe_errors(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto dir = trainer::test::scratch_dir("config_recipes");
  auto file = dir / "exp.yaml";
  trainer::test::write_file(file, yaml);
  std::vector<std::string> out;
  try {
    ValidateOptions opts;
    opts.cuda_available = true;
    load_and_validate(file.string(), overrides, opts);
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) {
      std::string s = d.str();
      auto p = s.find("exp.yaml");
      out.push_back(p == std::string::npos ? s : s.substr(p));
    }
  }
  return out;
}

const std::string kImageHead = "train:\n  max_steps: 10\ndata:\n  format: synthetic\n";
const std::string kGptHead = "model:\n  arch: gpt\ntrain:\n  max_steps: 10\ndata:\n  format: synthetic\n";

}  // namespace

TEST_CASE("the recipes' keys load with their defaults off and their values in range", "[unit]") {
  CHECK(recipe_errors(kImageHead + "  augment: {random_resized_crop: true, brightness: 0.4, contrast: 0.4, "
                                   "saturation: 0.4, hue: 0.1}\n  mixup: {alpha: 0.2, prob: 0.8}\n"
                                   "  cutmix: {alpha: 1.0}\n",
                      {"train.label_smoothing=0.1", "train.ema.decay=0.999", "train.ema.eval=true"})
            .empty());
  CHECK(recipe_errors(kGptHead, {"train.label_smoothing=0.1", "train.ema.decay=0.99"}).empty());
  auto e = recipe_errors(kImageHead, {"train.label_smoothing=1.5"});
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "--set train.label_smoothing=1.5: train.label_smoothing: value 1.5 is out of range [0, 1]");
}

TEST_CASE("mixup and cutmix on a GPT are config errors", "[unit]") {
  auto e = recipe_errors(kGptHead + "  mixup: {alpha: 0.2}\n  cutmix: {alpha: 1.0}\n");
  REQUIRE(e.size() == 2);
  CHECK(e[0] == "exp.yaml:7:11: data.mixup.alpha: mixes images and their labels; model.arch 'gpt' takes tokens");
  CHECK(e[1] == "exp.yaml:8:12: data.cutmix.alpha: mixes images and their labels; model.arch 'gpt' takes tokens");
}

TEST_CASE("RandomResizedCrop and colour jitter on a GPT are config errors", "[unit]") {
  auto e = recipe_errors(kGptHead, {"data.augment.random_resized_crop=true", "data.augment.hue=0.1"});
  REQUIRE(e.size() == 2);
  CHECK(e[0] == "--set data.augment.random_resized_crop=true: data.augment.random_resized_crop: transforms images; "
                "model.arch 'gpt' takes tokens");
  CHECK(e[1] == "--set data.augment.hue=0.1: data.augment.hue: transforms images; model.arch 'gpt' takes tokens");
}

TEST_CASE("mixup with train.cuda_graphs is refused, naming both", "[unit]") {
  auto e = recipe_errors("train:\n  max_steps: 10\n  cuda_graphs: true\ndata:\n  format: synthetic\n  mixup: {alpha: 0.2}\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:3:3: train.cuda_graphs: a captured step replays fixed inputs; mixup/cutmix draw a new mix "
                "every step: set train.cuda_graphs: false or turn the mix off");
}

TEST_CASE("saturation and hue on 1-channel images are config errors, brightness and contrast are not", "[unit]") {
  const std::string head = "model:\n  in_channels: 1\n" + kImageHead;
  CHECK(recipe_errors(head + "  augment: {brightness: 0.4, contrast: 0.4, random_resized_crop: true}\n").empty());
  auto e = recipe_errors(head + "  augment: {saturation: 0.4, hue: 0.1}\n");
  REQUIRE(e.size() == 2);
  CHECK(e[0] == "exp.yaml:7:13: data.augment.saturation: needs RGB images (saturation and hue are defined on 3 "
                "channels), but model.in_channels is 1");
  CHECK(e[1] == "exp.yaml:7:30: data.augment.hue: needs RGB images (saturation and hue are defined on 3 channels), "
                "but model.in_channels is 1");
}

TEST_CASE("data.val_resize needs data.image_size, at least it, and images", "[unit]") {
  CHECK(recipe_errors(kImageHead + "  image_size: 24\n  val_resize: 28\n").empty());
  auto e = recipe_errors(kImageHead + "  val_resize: 28\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:5:3: data.val_resize: resizes before the centred data.image_size crop, but data.image_size "
                "is 0 (keep): set data.image_size too");
  e = recipe_errors(kImageHead + "  image_size: 24\n  val_resize: 20\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:6:3: data.val_resize: 20 is smaller than the data.image_size 24 crop it is cut to");
  e = recipe_errors(kGptHead, {"data.val_resize=256"});
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "--set data.val_resize=256: data.val_resize: resizes images; model.arch 'gpt' takes tokens");
}

TEST_CASE("RandomResizedCrop's scale and ratio must be ordered pairs in range", "[unit]") {
  auto e = recipe_errors(kImageHead + "  augment:\n    random_resized_crop: true\n    rrc_scale: [0.5, 0.2]\n"
                                      "    rrc_ratio: [1.0]\n");
  REQUIRE(e.size() == 2);
  CHECK(e[0] == "exp.yaml:7:5: data.augment.rrc_scale: [0.5, 0.2] must satisfy 0 < min <= max <= 1");
  CHECK(e[1] == "exp.yaml:8:5: data.augment.rrc_ratio: expected two values [min, max], got 1");
  auto unused = recipe_errors(kImageHead + "  augment:\n    rrc_scale: [0.2, 1.0]\n");
  REQUIRE(unused.size() == 1);
  CHECK(unused[0] == "exp.yaml:6:5: data.augment.rrc_scale: has no effect without data.augment.random_resized_crop: true");
}

TEST_CASE("the alternating flip without hflip is refused as having no effect", "[unit]") {
  auto e = recipe_errors(kImageHead + "  augment:\n    hflip_alternate: true\n");
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "exp.yaml:6:5: data.augment.hflip_alternate: has no effect without data.augment.hflip: true");
  CHECK(recipe_errors(kImageHead + "  augment: {hflip: true, hflip_alternate: true}\n").empty());
}

TEST_CASE("bits per byte of token shards need data.bytes_per_token", "[unit]") {
  auto e = recipe_errors(kGptHead + "  bytes_per_token: 0\n", {"train.early_stopping.metric=bpb"});
  REQUIRE(e.size() == 1);
  CHECK(e[0] == "--set train.early_stopping.metric=bpb: train.early_stopping.metric: 'bpb' needs data.bytes_per_token "
                "for data.format 'synthetic' (bits per byte are only defined for byte-level text); watch ppl or loss");
  CHECK(recipe_errors(kGptHead + "  bytes_per_token: 4.2\n", {"train.early_stopping.metric=bpb"}).empty());
  auto img = recipe_errors(kImageHead + "  bytes_per_token: 4.2\n");
  REQUIRE(img.size() == 1);
  CHECK(img[0] == "exp.yaml:5:3: data.bytes_per_token: applies to token data, but model.arch 'resnet' takes images");
}

TEST_CASE("EMA and mix keys that would do nothing are config errors", "[unit]") {
  auto e = recipe_errors("train:\n  max_steps: 10\n  ema: {every: 4, eval: true}\ndata:\n  format: synthetic\n"
                         "  mixup: {prob: 0.5}\n");
  REQUIRE(e.size() == 3);
  CHECK(e[0] == "exp.yaml:6:11: data.mixup.prob: has no effect: data.mixup.alpha and data.cutmix.alpha are both 0");
  CHECK(e[1] == "exp.yaml:3:9: train.ema.every: has no effect: train.ema.decay is 0 (EMA off)");
  CHECK(e[2] == "exp.yaml:3:19: train.ema.eval: has no effect: train.ema.decay is 0 (EMA off)");
}

TEST_CASE("train.ema.lookahead: off with the EMA, and not with the warm-up or the EMA's evaluation", "[unit]") {
  auto off = recipe_errors(kImageHead, {"train.ema.lookahead=true"});
  REQUIRE(off.size() == 1);
  CHECK(off[0] == "--set train.ema.lookahead=true: train.ema.lookahead: has no effect: train.ema.decay is 0 (EMA off)");
  CHECK(recipe_errors(kImageHead, {"train.ema.decay=0.77", "train.ema.every=5", "train.ema.lookahead=true"}).empty());
  auto both = recipe_errors("train:\n  max_steps: 10\n  ema: {decay: 0.77, lookahead: true, warmup: true, eval: true}\n"
                            "data:\n  format: synthetic\n");
  REQUIRE(both.size() == 2);
  CHECK(both[0] == "exp.yaml:3:39: train.ema.warmup: conflicts with train.ema.lookahead, whose decay ramps up as "
                   "decay x (t/T)^3: set one");
  CHECK(both[1] == "exp.yaml:3:53: train.ema.eval: with train.ema.lookahead the weights become the shadow at every "
                   "update, and the run ends on it: the evaluation of the weights is the shadow's; leave it false");
}
