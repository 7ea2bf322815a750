// GPT: shapes, names, init, attention paths, sequence length, checkpointing (gradients and memory).
#include <catch2/catch.hpp>

#include "device/host_alloc_probe.hpp"
#include "model_test_util.hpp"

using namespace trainer;

TEST_CASE("gpt gives (B, T, vocab) logits for any T up to block_size", "[unit]") {
  auto model = test::make_model(test::tiny_gpt_cfg());
  for (int64_t T : {1, 5, 16}) CHECK(model->forward(torch::randint(64, {3, T})).sizes() == std::vector<int64_t>{3, T, 64});
}

TEST_CASE("gpt refuses a sequence longer than block_size", "[unit]") {
  auto cfg = test::tiny_gpt_cfg();
  cfg.block_size = 256;
  auto model = test::make_model(cfg);
  CHECK_THROWS_AS(model->forward(torch::zeros({1, 300}, torch::kLong)), std::invalid_argument);
  CHECK_THROWS_WITH(model->forward(torch::zeros({1, 300}, torch::kLong)),
                    "sequence length 300 exceeds model.block_size 256");
  CHECK_THROWS_WITH(model->forward(torch::full({1, 4}, 64, torch::kLong)), "token id 64 is outside model.vocab_size 64");
  CHECK_THROWS_WITH(model->forward(torch::zeros({4}, torch::kLong)),
                    "gpt expects int64 token ids of shape (B, T), got a 1-d Long tensor");
}

TEST_CASE("gpt has nanoGPT's parameter names and a tied head", "[unit]") {
  auto model = test::make_model(test::tiny_gpt_cfg());
  auto p = model->named_parameters();
  CHECK(p.size() == 28);
  for (const char* n : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                        "transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_proj.bias",
                        "transformer.h.0.ln_2.bias", "transformer.h.0.mlp.c_fc.weight", "transformer.h.1.mlp.c_proj.weight",
                        "transformer.ln_f.weight"})
    CHECK(p.contains(n));
  CHECK(p["transformer.h.0.attn.c_attn.weight"].sizes() == std::vector<int64_t>{96, 32});  // nn.Linear [out, in]
  CHECK_FALSE(p.contains("lm_head.weight"));  // registered once: optimizers see the tied tensor once
  auto state = io::named_state(*model);
  std::map<std::string, torch::Tensor> s(state.begin(), state.end());
  CHECK(s.size() == 29);  // + lm_head.weight, as PyTorch's state_dict()
  CHECK(s["lm_head.weight"].data_ptr() == s["transformer.wte.weight"].data_ptr());
  // nanoGPT's count: 64*32 + 16*32 + 2 * (2*64 + 32*96+96 + 32*32+32 + 32*128+128 + 128*32+32) + 64 = 28032
  CHECK(model->num_parameters() == 28'032);

  auto cfg = test::tiny_gpt_cfg();
  cfg.bias = false;
  auto nb = test::make_model(cfg)->named_parameters();
  CHECK(nb.size() == 2 * 6 + 3);
  CHECK_FALSE(nb.contains("transformer.ln_f.bias"));
  CHECK_FALSE(nb.contains("transformer.h.0.attn.c_attn.bias"));
}

TEST_CASE("gpt init: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer), zero biases", "[unit]") {
  auto cfg = test::tiny_gpt_cfg();
  cfg.n_layer = 8;
  cfg.n_embd = 128;
  auto p = test::make_model(cfg)->named_parameters();
  CHECK(p["transformer.h.3.mlp.c_fc.weight"].std().item<double>() == Approx(0.02).epsilon(0.02));
  CHECK(p["transformer.wte.weight"].std().item<double>() == Approx(0.02).epsilon(0.03));
  CHECK(p["transformer.h.3.mlp.c_proj.weight"].std().item<double>() == Approx(0.02 / std::sqrt(16.0)).epsilon(0.02));
  CHECK(p["transformer.h.5.attn.c_proj.weight"].std().item<double>() == Approx(0.02 / std::sqrt(16.0)).epsilon(0.02));
  CHECK(torch::equal(p["transformer.h.0.attn.c_attn.bias"], torch::zeros({384})));
  CHECK(torch::equal(p["transformer.h.0.ln_1.weight"], torch::ones({128})));
}

TEST_CASE("gpt sdpa and math attention agree to 1e-5 in fp32", "[unit]") {
  auto cfg = test::tiny_gpt_cfg();
  cfg.n_embd = 64;
  cfg.block_size = 32;
  auto sdpa = test::make_model(cfg, 11);
  cfg.attention = config::Attention::Math;
  auto math = test::make_model(cfg, 11);
  auto idx = torch::randint(64, {4, 32});
  auto a = sdpa->forward(idx), b = math->forward(idx);
  INFO("max logit diff " << test::max_abs_diff(a, b));
  CHECK(test::max_abs_diff(a, b) <= 1e-5);
  a.square().mean().backward();
  b.square().mean().backward();
  auto ga = sdpa->named_parameters()["transformer.h.0.attn.c_attn.weight"].grad();
  auto gb = math->named_parameters()["transformer.h.0.attn.c_attn.weight"].grad();
  CHECK(test::max_abs_diff(ga, gb) <= 1e-5);
}

TEST_CASE("gpt activation checkpointing: gradients equal the plain path, also with dropout", "[unit]") {
  for (double dropout : {0.0, 0.2}) {
    INFO("dropout " << dropout);
    auto cfg = test::tiny_gpt_cfg();
    cfg.dropout = dropout;
    auto plain = test::make_model(cfg, 4);
    cfg.activation_checkpointing = true;
    auto ckpt = test::make_model(cfg, 4);
    auto idx = torch::randint(64, {2, 16});
    for (auto& m : {plain, ckpt}) {
      torch::manual_seed(99);  // the same dropout masks in both forwards; the recompute must repeat them
      m->forward(idx).logsumexp(-1).mean().backward();
    }
    auto pc = ckpt->named_parameters();
    double worst = 0;
    for (const auto& p : plain->named_parameters()) worst = std::max(worst, test::max_abs_diff(p.value().grad(), pc[p.key()].grad()));
    INFO("max grad diff " << worst);
    CHECK(worst <= 1e-6);
  }
}

TEST_CASE("gpt activation checkpointing keeps less memory alive between forward and backward", "[unit]") {
  // Measured with a CPU allocator probe: bytes of tensor storage still allocated after forward (what
  // autograd saved for backward, plus the logits), and the peak over forward + backward.
  auto cfg = test::tiny_gpt_cfg();
  cfg.n_layer = 4;
  cfg.n_embd = 64;
  cfg.block_size = 64;
  auto idx = torch::randint(64, {8, 64});
  auto measure = [&](bool checkpointing, int64_t& retained, int64_t& peak) {
    cfg.activation_checkpointing = checkpointing;
    auto model = test::make_model(cfg, 1);
    auto& probe = device::HostAllocProbe::instance();
    device::HostAllocProbe::Scope scope;
    const int64_t before = probe.live();
    probe.reset_peak();
    auto loss = model->forward(idx).logsumexp(-1).mean();
    retained = probe.live() - before;
    loss.backward();
    peak = probe.peak() - before;
  };
  int64_t kept_plain = 0, peak_plain = 0, kept_ckpt = 0, peak_ckpt = 0;
  measure(false, kept_plain, peak_plain);
  measure(true, kept_ckpt, peak_ckpt);
  WARN("retained after forward: plain " << kept_plain << " B, checkpointed " << kept_ckpt << " B; peak: plain "
                                        << peak_plain << " B, checkpointed " << peak_ckpt << " B");
  // per block the plain path keeps ~20 (B, T, C)-sized tensors, the checkpointed one only its input
  CHECK(kept_ckpt * 2 < kept_plain);
  CHECK(peak_ckpt < peak_plain);
}

TEST_CASE("gpt FLOPs per sample follow nanoGPT's 6N + 12 L T C per token", "[unit]") {
  auto cfg = test::tiny_gpt_cfg();
  auto model = test::make_model(cfg);
  const double N = 28'032 - 16 * 32;  // without the position embedding, as nanoGPT
  CHECK(model->train_flops_per_sample({16}) == Approx((6 * N + 12.0 * 2 * 16 * 32) * 16));
}
