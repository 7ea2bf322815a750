// Metrics against values worked out by hand.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/eval/eval_metrics.hpp"

using namespace trainer::engine;

TEST_CASE("top-1 and top-5 counts on a hand-made batch", "[unit]") {
  // 3 samples, 6 classes
  auto logits = torch::tensor({{0.1, 0.9, 0.0, 0.0, 0.0, 0.0},    // argmax 1, target 1: top1 hit
                               {0.6, 0.5, 0.4, 0.3, 0.2, 0.1},    // target 4 is rank 5: top5 hit only
                               {0.6, 0.5, 0.4, 0.3, 0.2, 0.1}},   // target 5 is rank 6: miss
                              torch::kFloat32);
  auto target = torch::tensor({1, 4, 5}, torch::kInt64);
  CHECK(topk_correct(logits, target, 1).item<int64_t>() == 1);
  CHECK(topk_correct(logits, target, 5).item<int64_t>() == 2);
  CHECK(topk_correct(logits, target, 10).item<int64_t>() == 3);  // k capped at the 6 classes
}

TEST_CASE("classification accumulator: mean loss and accuracies over two batches", "[unit]") {
  const double l3 = std::log(3.0);
  EvalAccumulator acc;
  // logits (ln 3 at one class, 0 elsewhere) over 4 classes give that class p = 3/6 and the others 1/6
  acc.add_classification(torch::tensor({{0.0, 0.0, 0.0, l3}, {l3, 0.0, 0.0, 0.0}}),
                         torch::tensor({3, 3}, torch::kInt64));  // hit (loss ln 2), miss (loss ln 6)
  acc.add_classification(torch::tensor({{0.0, l3, 0.0, 0.0}}), torch::tensor({1}, torch::kInt64));  // hit, ln 2
  auto r = acc.result();
  CHECK(r.count == 3);
  CHECK(r.loss == Approx((std::log(2.0) + std::log(6.0) + std::log(2.0)) / 3));
  CHECK(*r.accuracy == Approx(2.0 / 3));
  CHECK(*r.top5 == Approx(1.0));  // 4 classes: every target is within the top 4
  CHECK_FALSE(r.bpb.has_value());
  CHECK_FALSE(r.ppl.has_value());
}

TEST_CASE("token accumulator: per-token loss, perplexity and bits per byte", "[unit]") {
  EvalAccumulator acc(/*bytes_per_token=*/1.0);  // byte-level tokens
  // B=1, T=2, V=256, uniform logits: loss ln 256 per token, ppl 256, bpb 8 bits
  acc.add_tokens(torch::zeros({1, 2, 256}), torch::tensor({{7, 200}}, torch::kInt64));
  auto r = acc.result();
  CHECK(r.count == 2);
  CHECK(r.loss == Approx(std::log(256.0)));
  CHECK(*r.ppl == Approx(256.0));
  CHECK(*r.bpb == Approx(8.0));
  CHECK_FALSE(r.accuracy.has_value());
}

TEST_CASE("perplexity and bits per byte of a loss", "[unit]") {
  CHECK(perplexity(std::log(50.0)) == Approx(50.0));
  CHECK(bits_per_byte(std::log(2.0)) == Approx(1.0));
  CHECK(bits_per_byte(1.0) == Approx(1.4426950408889634));
}

TEST_CASE("token accumulator: bits per byte only with the bytes per token known", "[unit]") {
  // B=1, T=2, V=256 uniform: ln 256 nats per token = 8 bits per token
  EvalAccumulator unknown;  // token shards without data.bytes_per_token: perplexity, no bpb
  unknown.add_tokens(torch::zeros({1, 2, 256}), torch::tensor({{7, 200}}, torch::kInt64));
  auto r = unknown.result();
  CHECK(*r.ppl == Approx(256.0));
  CHECK_FALSE(r.bpb.has_value());
  EvalAccumulator bpe(4.0);  // 4 bytes of text per token: 8 bits per token are 2 bits per byte
  bpe.add_tokens(torch::zeros({1, 2, 256}), torch::tensor({{7, 200}}, torch::kInt64));
  CHECK(*bpe.result().bpb == Approx(2.0));
  CHECK(bits_per_byte(std::log(2.0) * 4.2, 4.2) == Approx(1.0));
}
