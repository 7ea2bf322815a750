// Dropout streams by unit (models/unit_rng.hpp): with a step key set, GPT's and ViT's forward in
// training mode draws each unit's masks from (key, microbatch, unit) alone, so forward_units over any
// stages, with other draws before each stage, gives forward's output bit for bit; the default stream
// is left where it was; activation checkpointing's recompute repeats the masks; evaluation and a
// model without a key are unchanged.
#include <catch2/catch.hpp>

#include <set>

#include "models/model.hpp"
#include "models/unit_rng.hpp"
#include "pipeline/plan.hpp"
#include "tiny_models.hpp"

using namespace trainer;

namespace unit_streams {  // named: the unity build joins the pipeline tests

config::RunConfig gpt_config() { return test::tiny_stage_gpt(3, /*dropout=*/0.2); }
config::RunConfig vit_config() { return test::tiny_stage_vit(/*dropout=*/0.2, /*attention_dropout=*/0.1); }

models::ModelPtr build(const config::RunConfig& c) {
  torch::manual_seed(5);
  auto m = models::builtin_models().create(c.model);
  // torchvision zeroes ViT's head: the logits would be its zero bias whatever the masks
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters())
    if (!p.ne(0).any().item<bool>()) p.normal_(0, 0.5);
  m->train();
  return m;
}

torch::Tensor input_of(const config::RunConfig& c) {
  torch::manual_seed(17);
  if (c.model.arch == "gpt") return torch::randint(c.model.vocab_size, {4, c.model.block_size});
  return torch::randn({4, 1, c.model.image_size, c.model.image_size});
}

// forward_units over the stages of pp P, with an unrelated draw before each stage (another rank's
// units, another microbatch: what a stage's default stream would have seen)
torch::Tensor chained(models::Model& m, const config::RunConfig& c, int64_t P, const torch::Tensor& x) {
  auto cfg = c;
  cfg.dist.pipeline_parallel = P;
  torch::Tensor h = x;
  for (const auto& r : pipeline::make_plan(cfg).stages) {
    (void)torch::rand({37});
    h = m.forward_units(h, r.first, r.last);
  }
  return h;
}

}  // namespace unit_streams


TEST_CASE("with a step key, forward_units over any stages draws forward's dropout masks, bit for bit",
          "[unit][pipeline]") {
  for (const auto& c : {unit_streams::gpt_config(), unit_streams::vit_config()}) {
    INFO(c.model.arch);
    auto model = unit_streams::build(c);
    REQUIRE(model->draws_in_training());
    const auto x = unit_streams::input_of(c);
    model->set_step_key(1234);
    model->set_microbatch(3);
    torch::manual_seed(1);
    const auto whole = model->forward(x);
    for (int64_t P : {2, 3, 5}) {
      INFO("P=" << P);
      torch::manual_seed(2);  // another default stream: the units do not read it
      CHECK(torch::equal(unit_streams::chained(*model, c, P, x), whole));
    }
    // another microbatch or another step: other masks
    model->set_microbatch(4);
    CHECK_FALSE(torch::equal(model->forward(x), whole));
    model->set_microbatch(3);
    model->set_step_key(1235);
    CHECK_FALSE(torch::equal(model->forward(x), whole));
    // without a key the units draw from the default stream: the draws before each stage change the masks
    model->set_step_key(std::nullopt);
    torch::manual_seed(1);
    const auto plain = model->forward(x);
    torch::manual_seed(1);
    CHECK_FALSE(torch::equal(unit_streams::chained(*model, c, 2, x), plain));
    // evaluation draws nothing: with or without a key, the same logits
    model->eval();
    const auto ev = model->forward(x);
    model->set_step_key(1234);
    CHECK(torch::equal(model->forward(x), ev));
  }
}

TEST_CASE("a keyed forward leaves the default stream where it was, and draws from it without a key", "[unit][pipeline]") {
  auto c = unit_streams::gpt_config();
  auto model = unit_streams::build(c);
  const auto x = unit_streams::input_of(c);
  auto cpu = at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
  torch::manual_seed(8);
  const auto before = cpu.get_state();
  model->set_step_key(99);
  (void)model->forward(x);
  CHECK(torch::equal(cpu.get_state(), before));
  model->set_step_key(std::nullopt);
  (void)model->forward(x);
  CHECK_FALSE(torch::equal(cpu.get_state(), before));
  // the step key is one draw of that stream
  torch::manual_seed(8);
  const uint64_t k1 = models::draw_step_key(), k2 = models::draw_step_key();
  torch::manual_seed(8);
  CHECK(models::draw_step_key() == k1);
  CHECK(k1 != k2);
}

TEST_CASE("with a step key, activation checkpointing's recompute repeats each unit's masks", "[unit][pipeline]") {
  for (auto c : {unit_streams::gpt_config(), unit_streams::vit_config()}) {
    INFO(c.model.arch);
    std::vector<torch::Tensor> grads[2];
    torch::Tensor out[2];
    for (int ac = 0; ac < 2; ++ac) {
      c.model.activation_checkpointing = ac == 1;
      auto model = unit_streams::build(c);
      model->set_step_key(77);
      model->set_microbatch(1);
      out[ac] = model->forward(unit_streams::input_of(c));
      out[ac].square().mean().backward();
      for (const auto& p : model->parameters()) grads[ac].push_back(p.grad().clone());
    }
    CHECK(torch::equal(out[0], out[1]));
    REQUIRE(grads[0].size() == grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) CHECK(torch::allclose(grads[0][i], grads[1][i], 1e-6, 1e-7));
  }
}

TEST_CASE("unit stream seeds differ for nearby keys, microbatches and units", "[unit][pipeline]") {
  std::set<uint64_t> seeds;
  for (uint64_t key : {0ULL, 1ULL, 2ULL})
    for (int64_t micro = 0; micro < 8; ++micro)
      for (int64_t unit = 0; unit < 8; ++unit) seeds.insert(models::unit_stream_seed(key, micro, unit));
  CHECK(seeds.size() == 3 * 8 * 8);
  CHECK(models::unit_stream_seed(5, 1, 2) == models::unit_stream_seed(5, 1, 2));
}
