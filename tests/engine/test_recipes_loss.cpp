// Label smoothing and soft-target cross-entropy (train.label_smoothing, data.mixup/cutmix) against
// closed forms in double and against PyTorch's values (tests/reference/golden/recipes_ref.safetensors,
// written by tests/reference/make_recipes_ref.py).
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "engine/step/batch_mix.hpp"
#include "engine/optim/precision.hpp"
#include "engine/step/train_step.hpp"
#include "io/safetensors.hpp"
#include "test_util.hpp"

using namespace trainer::engine;

namespace {

std::map<std::string, torch::Tensor> recipe_refs() {
  static const auto file =
      trainer::io::load_safetensors(trainer::test::source_path("tests/reference/golden/recipes_ref.safetensors"));
  std::map<std::string, torch::Tensor> m;
  for (const auto& [name, t] : file.tensors) m[name] = t;
  return m;
}

// mean over rows of sum_c -q_c log softmax(logits)_c with q = (1 - eps) target + eps / C, in double
double smoothed_ce_closed_form(const torch::Tensor& logits, const torch::Tensor& soft_target, double eps) {
  auto l = logits.to(torch::kFloat64).reshape({-1, logits.size(-1)});
  auto q = soft_target.to(torch::kFloat64).reshape({-1, logits.size(-1)});
  const auto c = static_cast<double>(l.size(1));
  double total = 0;
  for (int64_t i = 0; i < l.size(0); ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < l.size(1); ++j) mx = std::max(mx, l[i][j].item<double>());
    double z = 0;
    for (int64_t j = 0; j < l.size(1); ++j) z += std::exp(l[i][j].item<double>() - mx);
    const double log_z = mx + std::log(z);
    for (int64_t j = 0; j < l.size(1); ++j)
      total -= ((1 - eps) * q[i][j].item<double>() + eps / c) * (l[i][j].item<double>() - log_z);
  }
  return total / static_cast<double>(l.size(0));
}

torch::Tensor one_hot_of(const torch::Tensor& target, int64_t classes) {
  return torch::one_hot(target.reshape({-1}), classes).to(torch::kFloat64);
}

}  // namespace

TEST_CASE("label smoothing: the loss of (B, C) logits equals the closed form and PyTorch's", "[unit]") {
  auto ref = recipe_refs();
  const auto& logits = ref.at("ls.logits");
  const auto& target = ref.at("ls.target");
  const double got = mean_cross_entropy(logits, target, 0.1).item<double>();
  CHECK(got == Approx(smoothed_ce_closed_form(logits, one_hot_of(target, 10), 0.1)).epsilon(1e-6));
  CHECK(got == Approx(ref.at("ls.loss").item<double>()).epsilon(1e-6));  // torch cross_entropy(label_smoothing=0.1)
  // smoothing costs: the smoothed loss differs from the plain one (the test would notice a dropped option)
  CHECK(std::abs(got - mean_cross_entropy(logits, target).item<double>()) > 1e-3);
}

TEST_CASE("label smoothing 0 is the plain cross-entropy bit for bit", "[unit]") {
  auto ref = recipe_refs();
  namespace F = torch::nn::functional;
  const auto plain = F::cross_entropy(ref.at("ls.logits"), ref.at("ls.target"));
  CHECK(torch::equal(mean_cross_entropy(ref.at("ls.logits"), ref.at("ls.target"), 0.0), plain));
  const auto& tl = ref.at("tok.logits");
  CHECK(torch::equal(mean_cross_entropy(tl, ref.at("tok.target")),
                     F::cross_entropy(tl.reshape({-1, 7}), ref.at("tok.target").reshape({-1}))));
}

TEST_CASE("label smoothing: the token models' (B, T, V) path equals the closed form and PyTorch's", "[unit]") {
  auto ref = recipe_refs();
  const auto& logits = ref.at("tok.logits");  // (2, 5, 7)
  const auto& target = ref.at("tok.target");  // (2, 5)
  const double got = mean_cross_entropy(logits, target, 0.2).item<double>();
  CHECK(got == Approx(smoothed_ce_closed_form(logits, one_hot_of(target, 7), 0.2)).epsilon(1e-6));
  CHECK(got == Approx(ref.at("tok.loss").item<double>()).epsilon(1e-6));
}

TEST_CASE("label smoothing under bf16 and fp16 autocast: the loss runs in fp32 on the low-precision logits", "[unit]") {
  auto ref = recipe_refs();
  const auto& target = ref.at("ls.target");
  const torch::Device cpu(torch::kCPU);
  for (auto [precision, dtype] : {std::pair{Precision::Bf16, torch::kBFloat16}, std::pair{Precision::Fp16, torch::kHalf}}) {
    INFO(precision_name(precision));
    const auto logits = ref.at("bf16.logits").to(dtype);  // the closed form reads the same rounded values
    torch::Tensor loss;
    {
      AutocastScope autocast(precision, cpu);
      loss = mean_cross_entropy(logits, target, 0.1);
    }
    CHECK(loss.scalar_type() == torch::kFloat32);
    CHECK(loss.item<double>() == Approx(smoothed_ce_closed_form(logits, one_hot_of(target, 10), 0.1)).epsilon(1e-6));
    if (precision == Precision::Bf16) CHECK(loss.item<double>() == Approx(ref.at("bf16.loss").item<double>()).epsilon(1e-6));
  }
}

TEST_CASE("soft targets with label smoothing equal PyTorch's and timm's SoftTargetCrossEntropy", "[unit]") {
  auto ref = recipe_refs();
  const auto& logits = ref.at("ls.logits");
  const auto& soft = ref.at("soft.target");  // 0.7 one_hot(y) + 0.3 one_hot(y.flip(0))
  const double got = mean_cross_entropy(logits, soft, 0.1).item<double>();
  CHECK(got == Approx(smoothed_ce_closed_form(logits, soft, 0.1)).epsilon(1e-6));
  CHECK(got == Approx(ref.at("soft.loss").item<double>()).epsilon(1e-6));
  CHECK(got == Approx(ref.at("soft.timm_loss").item<double>()).epsilon(1e-6));
}

TEST_CASE("mixup: the mixed batch and soft targets are the closed form of lambda and the flipped batch", "[unit]") {
  auto ref = recipe_refs();
  trainer::config::MixupConfig mix;
  mix.alpha = 0.4;
  BatchMixer mixer(mix, {}, 10, /*seed=*/5, /*rank=*/0);
  const auto x = torch::rand({8, 3, 4, 5});
  const auto& y = ref.at("ls.target");
  MixChoice c;
  c.kind = MixChoice::Kind::Mixup;
  c.lambda = 0.7;
  auto [mixed, soft] = mixer.apply(x, y, c);
  for (int64_t i = 0; i < 8; ++i) {
    const auto want = x[i] * 0.7f + x[7 - i] * 0.3f;  // float32, as torch's scalar products
    CHECK(torch::allclose(mixed[i], want, 1e-6, 1e-7));
  }
  CHECK(torch::allclose(soft, ref.at("soft.target"), 1e-6, 1e-7));
  CHECK(soft.sum(1).allclose(torch::ones({8})));
  CHECK(torch::equal(x, x.clone()));  // the input itself is left as it was
}

TEST_CASE("cutmix: the box comes from the flipped batch, lambda is the area left", "[unit]") {
  trainer::config::CutmixConfig cut;
  cut.alpha = 1.0;
  BatchMixer mixer({}, cut, 4, 5, 0);
  const auto x = torch::rand({3, 2, 6, 8});
  const auto y = torch::tensor({0, 1, 3}, torch::kInt64);
  MixChoice c;
  c.kind = MixChoice::Kind::Cutmix;
  c.y0 = 1, c.y1 = 4, c.x0 = 2, c.x1 = 7;
  c.lambda = 1.0 - 15.0 / 48.0;
  auto [mixed, soft] = mixer.apply(x, y, c);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t yy = 0; yy < 6; ++yy)
      for (int64_t xx = 0; xx < 8; ++xx) {
        const bool in_box = yy >= 1 && yy < 4 && xx >= 2 && xx < 7;
        const auto want = in_box ? x[2 - i].select(1, yy).select(1, xx) : x[i].select(1, yy).select(1, xx);
        REQUIRE(torch::equal(mixed[i].select(1, yy).select(1, xx), want));
      }
  CHECK(soft[0][0].item<float>() == Approx(33.0 / 48));
  CHECK(soft[0][3].item<float>() == Approx(15.0 / 48));
  CHECK(soft[1][1].item<float>() == Approx(1.0));  // the middle sample mixes with itself
}

TEST_CASE("mixer choices: a pure function of (seed, rank, step, micro-batch), timm's switch and prob", "[unit]") {
  trainer::config::MixupConfig mix;
  mix.alpha = 0.8;
  trainer::config::CutmixConfig cut;
  cut.alpha = 1.0;
  BatchMixer both(mix, cut, 10, 1, 0);
  int cutmixes = 0, mixups = 0;
  for (int64_t step = 0; step < 400; ++step) {
    const auto c = both.choose(step, 0, 32, 32);
    const auto again = both.choose(step, 0, 32, 32);
    REQUIRE(c.kind == again.kind);
    REQUIRE(c.lambda == again.lambda);
    REQUIRE(c.kind != MixChoice::Kind::None);  // prob 1
    REQUIRE(c.lambda >= 0.0);
    REQUIRE(c.lambda <= 1.0);
    if (c.kind == MixChoice::Kind::Cutmix) {
      ++cutmixes;
      REQUIRE(c.y0 <= c.y1);
      REQUIRE(c.x0 <= c.x1);
      REQUIRE(c.y1 <= 32);
      REQUIRE(c.x1 <= 32);
      REQUIRE(c.lambda == Approx(1.0 - (c.y1 - c.y0) * (c.x1 - c.x0) / 1024.0));
    } else {
      ++mixups;
    }
  }
  CHECK(cutmixes > 150);  // switch_prob 0.5 of 400
  CHECK(mixups > 150);
  CHECK(both.choose(3, 0, 32, 32).lambda != both.choose(3, 1, 32, 32).lambda);   // micro-batches differ
  CHECK(BatchMixer(mix, cut, 10, 2, 0).choose(3, 0, 32, 32).lambda != both.choose(3, 0, 32, 32).lambda);  // seeds
  mix.prob = 0.0;
  BatchMixer never(mix, cut, 10, 1, 0);
  for (int64_t step = 0; step < 50; ++step) REQUIRE(never.choose(step, 0, 32, 32).kind == MixChoice::Kind::None);
  mix.prob = 1.0;
  mix.switch_prob = 1.0;
  BatchMixer always_cut(mix, cut, 10, 1, 0);
  for (int64_t step = 0; step < 50; ++step) REQUIRE(always_cut.choose(step, 0, 32, 32).kind == MixChoice::Kind::Cutmix);
}

TEST_CASE("Beta(a, a) draws have the mean and variance of the distribution", "[unit]") {
  for (double a : {0.2, 1.0, 4.0}) {
    INFO("alpha " << a);
    const int n = 40000;
    double sum = 0, sum_sq = 0;
    for (int i = 0; i < n; ++i) {
      const double v = sample_beta(a, static_cast<uint64_t>(i) * 7919u + 11u);
      REQUIRE(v >= 0.0);
      REQUIRE(v <= 1.0);
      sum += v;
      sum_sq += v * v;
    }
    const double mean = sum / n, var = sum_sq / n - mean * mean;
    CHECK(mean == Approx(0.5).margin(0.01));
    CHECK(var == Approx(1.0 / (4.0 * (2.0 * a + 1.0))).epsilon(0.05));  // Var Beta(a, a) = 1 / (4 (2a + 1))
  }
}
