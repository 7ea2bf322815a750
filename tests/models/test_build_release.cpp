// build_model_on with BuildContext::before_move (what a pipeline rank does at start-up): the hook
// sees the model built on the CPU, and the weights it releases stay released when the model moves to
// its device (io::move_weights; Module::to would allocate and fill their whole shape), while every
// other weight arrives with one process's values. The [gpu] case moves to cuda:0 (set_data cannot move
// a CPU tensor to the meta device, so no device stands in for it on a CPU host).
#include <catch2/catch.hpp>

#include <torch/cuda.h>

#include <functional>
#include <set>

#include "io/weight_copy.hpp"
#include "model_test_util.hpp"
#include "models/model.hpp"
#include "skip.hpp"

using namespace trainer;

namespace build_release {  // named: the unity build joins the model tests

config::ModelConfig tiny_gpt() { return test::tiny_gpt_cfg(); }

bool in_block0(const std::string& name) { return name.starts_with("transformer.h.0."); }

// The model built on `device` with transformer.h.0's weights released before the move, and the device
// its hook saw the model on.
std::pair<models::ModelPtr, torch::Device> built_releasing_block0(const torch::Device& device) {
  torch::Device seen(torch::kCPU);
  models::BuildContext ctx;
  ctx.before_move = [&seen](models::Model& m) {
    for (auto& p : m.named_parameters(/*recurse=*/true)) {
      seen = p.value().device();
      if (in_block0(p.key())) io::release_weight(p.value());
    }
  };
  torch::manual_seed(4);
  auto m = models::build_model_on(tiny_gpt(), device, ctx);
  return {m, seen};
}

// Every weight on `device`: block 0's released, the rest with the plain build's values.
void check_moved(const models::ModelPtr& m, const torch::Device& device, bool values) {
  torch::manual_seed(4);
  auto plain = models::build_model_on(tiny_gpt(), torch::Device(torch::kCPU));
  auto ref = plain->named_parameters(/*recurse=*/true);
  int64_t released = 0;
  for (auto& p : m->named_parameters(/*recurse=*/true)) {
    INFO(p.key());
    CHECK(p.value().device().type() == device.type());
    CHECK(p.value().sizes() == ref[p.key()].sizes());
    CHECK(io::is_released(p.value()) == in_block0(p.key()));
    released += in_block0(p.key()) ? 1 : 0;
    if (values && !in_block0(p.key())) CHECK(torch::equal(p.value().cpu(), ref[p.key()]));
  }
  int64_t in_ref = 0;
  for (const auto& p : ref) in_ref += in_block0(p.key()) ? 1 : 0;
  CHECK(in_ref >= 6);  // ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj (and their biases)
  CHECK(released == in_ref);
}

}  // namespace build_release

TEST_CASE("build_model_on: before_move sees the CPU model, and what it releases stays released", "[unit]") {
  auto [cpu, seen] = build_release::built_releasing_block0(torch::Device(torch::kCPU));
  CHECK(seen.is_cpu());
  build_release::check_moved(cpu, torch::Device(torch::kCPU), /*values=*/true);
}

TEST_CASE("build_model_on to cuda:0: the released weights take no device memory, the others arrive whole", "[gpu]") {
  if (!torch::cuda::is_available()) TRAINER_SKIP("no CUDA device");
  const torch::Device cuda(torch::kCUDA, 0);
  auto [m, seen] = build_release::built_releasing_block0(cuda);
  CHECK(seen.is_cpu());  // the hook ran before the move
  build_release::check_moved(m, cuda, /*values=*/true);
  // Module::to would have given a released weight its whole shape's bytes on the device
  torch::Tensor t = torch::zeros({4, 4});
  io::release_weight(t);
  CHECK_FALSE(io::is_released(t.to(cuda)));
}

namespace build_release {

// BuildContext::keeps_unit (models/partial_build.hpp): for each set of kept units, a build that draws
// every weight in a whole build's order (the generator ends where a whole build leaves it), holds the
// kept units' weights bit for bit (and those they read: `reads(name, keep)`), and releases the rest.
void check_partial_builds(const config::ModelConfig& cfg, const std::vector<std::set<size_t>>& keeps,
                          const std::function<bool(const std::string&, const std::set<size_t>&)>& reads) {
  auto cpu = at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
  torch::manual_seed(6);
  auto whole = models::build_model_on(cfg, torch::Device(torch::kCPU));
  const auto after_whole = cpu.get_state();
  const auto ref = whole->named_parameters(/*recurse=*/true);
  const auto units = whole->units();
  for (const auto& keep : keeps) {
    models::BuildContext ctx;
    ctx.keeps_unit = [&keep](size_t u) { return keep.count(u) > 0; };
    torch::manual_seed(6);
    auto part = models::build_model_on(cfg, torch::Device(torch::kCPU), ctx);
    CHECK(torch::equal(cpu.get_state(), after_whole));  // every draw made, in order
    int64_t held = 0, all = 0;
    for (const auto& p : part->named_parameters(/*recurse=*/true)) {
      const auto u = static_cast<size_t>(models::unit_of(units, p.key()));
      const bool kept = keep.count(u) || reads(p.key(), keep);
      INFO(cfg.arch << ", keep " << *keep.begin() << " (" << keep.size() << " units): " << p.key());
      CHECK(io::is_released(p.value()) == (!kept && p.value().numel() > 1));
      if (kept) CHECK(torch::equal(p.value(), ref[p.key()]));
      held += io::is_released(p.value()) ? 0 : p.value().numel();
      all += p.value().numel();
    }
    CHECK(held < all);
  }
}

}  // namespace build_release

TEST_CASE("GPT and ViT built with keeps_unit: the kept units bit for bit a whole build's, the others released, "
          "the same draws",
          "[unit]") {
  auto gpt = build_release::tiny_gpt();
  gpt.n_layer = 3;  // units: 0 embeddings, 1-3 the blocks, 4 the head, which reads unit 0's wte
  build_release::check_partial_builds(gpt, {{0}, {1}, {4}, {2, 3}, {0, 4}, {3}},
                                      [](const std::string& name, const std::set<size_t>& keep) {
                                        return name == "transformer.wte.weight" && keep.count(4) > 0;
                                      });
  auto vit = test::tiny_vit_cfg();
  vit.num_layers = 3;  // units: 0 embeddings, 1-3 the blocks, 4 the head
  build_release::check_partial_builds(vit, {{0}, {1}, {4}, {2, 3}, {0, 4}},
                                      [](const std::string&, const std::set<size_t>&) { return false; });
}
