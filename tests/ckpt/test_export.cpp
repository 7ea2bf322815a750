// `trainer export`: checkpoint -> safetensors with the model's own (torchvision / nanoGPT) names.
// The last TEST_CASE writes the fixture tests/python/test_export_interop.py loads into PyTorch.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include "ckpt_test_util.hpp"
#include "config/load.hpp"
#include "engine/commands/export.hpp"
#include "io/safetensors.hpp"
#include "models/model.hpp"
#include "test_util.hpp"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

config::RunConfig gpt_run_cfg() {
  config::RunConfig c;
  c.model.arch = "gpt";
  c.model.vocab_size = 64;
  c.model.block_size = 16;
  c.model.n_layer = 2;
  c.model.n_head = 4;
  c.model.n_embd = 32;
  return c;
}

config::RunConfig resnet_run_cfg() {
  config::RunConfig c;
  c.model.arch = "resnet";
  c.model.depth = 18;
  c.model.num_classes = 10;
  return c;
}

// A Fashion-MNIST-shaped ViT: one input channel, where torchvision hard-wires three (the Python side
// swaps in a 1-channel conv_proj before loading).
config::RunConfig vit_run_cfg() {
  config::RunConfig c;
  c.model.arch = "vit";
  c.model.in_channels = 1;
  c.model.image_size = 28;
  c.model.patch_size = 7;
  c.model.num_layers = 2;
  c.model.num_heads = 2;
  c.model.hidden_dim = 16;
  c.model.mlp_dim = 24;
  return c;
}

models::ModelPtr build(const config::RunConfig& cfg, int64_t seed) {
  models::ModelRegistry registry;
  models::register_builtin_models(registry);
  torch::manual_seed(seed);
  return registry.create(cfg.model);
}

// A checkpoint as `trainer run` writes it: model group + state with the resolved config.
fs::path save_model_checkpoint(const fs::path& dir, int64_t step, const config::RunConfig& cfg,
                               const models::Model& model) {
  io::CheckpointStore store(dir);
  io::CheckpointContent c;
  c.groups["model"] = io::named_state(model);
  c.state = {{"step", step},
             {io::kStateConfigYaml, config::dump_yaml(cfg)},
             {io::kStateConfigHash, config::config_hash(cfg)}};
  return store.save(step, c);
}

std::map<std::string, torch::Tensor> as_map(const io::SafetensorsFile& f) { return {f.tensors.begin(), f.tensors.end()}; }

// A few training-mode forwards so BatchNorm running statistics are not their initial values.
void warm_batchnorm(models::Model& m) {
  m.train();
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 2; ++i) m.forward(torch::randn({4, 3, 32, 32}));
  m.eval();
}

}  // namespace

TEST_CASE("export: fp32 file holds the model's named state and its metadata", "[unit]") {
  auto dir = test::scratch_dir("ckpt_export_fp32");
  auto cfg = gpt_run_cfg();
  auto model = build(cfg, 5);
  save_model_checkpoint(dir / "checkpoints", 12, cfg, *model);
  auto r = test::run_trainer("export " + (dir / "checkpoints" / "latest").string() + " --out " +
                             (dir / "out" / "gpt.safetensors").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output == "exported " + fs::canonical(dir / "checkpoints" / "step-12").string() + " -> " +
                        (dir / "out" / "gpt.safetensors").string() + " (fp32)\n");
  auto f = io::load_safetensors((dir / "out" / "gpt.safetensors").string());
  auto expected = io::named_state(*model);
  auto got = as_map(f);
  REQUIRE(got.size() == expected.size());
  for (const auto& [name, t] : expected) {
    INFO(name);
    REQUIRE(got.count(name));
    CHECK(torch::equal(got.at(name), t));
  }
  CHECK(got.count("lm_head.weight"));  // nanoGPT's tied alias, needed by load_state_dict(strict=True)
  CHECK(f.metadata.at("arch") == "gpt");
  CHECK(f.metadata.at("layout") == "nanoGPT (model.GPT)");
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.metadata.at("dtype") == "fp32");
  CHECK(f.metadata.at("step") == "12");
  CHECK(f.metadata.at("config_hash") == config::config_hash(cfg));
  auto mc = nlohmann::json::parse(f.metadata.at("model_config"));
  CHECK(mc["n_embd"] == 32);
  CHECK(mc["n_layer"] == 2);
  CHECK(mc["bias"] == true);
  CHECK_FALSE(mc.contains("depth"));  // resnet-only keys are left out of a GPT's config
}

TEST_CASE("export under trainer launch: rank 0 writes the file, the other rank says it has nothing to do", "[unit]") {
  auto dir = test::scratch_dir("ckpt_export_launched");
  auto cfg = gpt_run_cfg();
  auto model = build(cfg, 5);
  save_model_checkpoint(dir / "checkpoints", 3, cfg, *model);
  const auto out = dir / "gpt.safetensors";
  auto r = test::run_trainer("launch -n 2 -- export " + (dir / "checkpoints").string() + " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank1] trainer export runs on rank 0 only; rank 1 has nothing to do"));
  CHECK_THAT(r.output, Catch::Contains("[rank0] exported "));
  CHECK(r.output.find("[rank1] exported") == std::string::npos);
  CHECK(io::load_safetensors(out.string()).tensors.size() == io::named_state(*model).size());
}

TEST_CASE("export: bf16 and fp16 convert floating tensors and keep integer buffers", "[unit]") {
  auto dir = test::scratch_dir("ckpt_export_half");
  auto cfg = resnet_run_cfg();
  auto model = build(cfg, 6);
  warm_batchnorm(*model);
  save_model_checkpoint(dir, 3, cfg, *model);
  for (const auto& [dtype, type] : {std::pair{"bf16", torch::kBFloat16}, std::pair{"fp16", torch::kHalf}}) {
    INFO(dtype);
    auto out = (dir / (std::string(dtype) + ".safetensors")).string();
    engine::export_checkpoint((dir / "step-3").string(), out, dtype);
    auto got = as_map(io::load_safetensors(out));
    for (const auto& [name, t] : io::named_state(*model)) {
      INFO(name);
      if (t.is_floating_point()) {
        CHECK(got.at(name).scalar_type() == type);
        CHECK(torch::equal(got.at(name), t.to(type)));
      } else {
        CHECK(got.at(name).scalar_type() == torch::kLong);  // num_batches_tracked
        CHECK(torch::equal(got.at(name), t));
      }
    }
  }
}

TEST_CASE("export: a dtype whose range a finite weight overflows is refused, naming the tensor", "[unit]") {
  auto dir = test::scratch_dir("ckpt_export_overflow");
  auto cfg = gpt_run_cfg();
  auto model = build(cfg, 7);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters())
      if (p.key() == "transformer.h.1.mlp.c_proj.bias") p.value().fill_(1e5);  // finite in fp32 and bf16, beyond fp16's 65504
  }
  save_model_checkpoint(dir, 3, cfg, *model);
  const auto out = dir / "fp16.safetensors";
  auto r = test::run_trainer("export " + (dir / "step-3").string() + " --out " + out.string() + " --dtype fp16");
  CHECK(r.exit_code == 1);
  CHECK(r.output == "error: --dtype fp16: 32 value(s) of transformer.h.1.mlp.c_proj.bias (largest magnitude 100000) "
                    "overflow fp16's range and would be infinite; export as bf16 or fp32\n");
  CHECK_FALSE(fs::exists(out));
  r = test::run_trainer("export " + (dir / "step-3").string() + " --out " + out.string() + " --dtype bf16");
  CHECK(r.exit_code == 0);
}

// fp16's smallest subnormal is 6e-8: smaller weights became 0 in silence (found from outside)
TEST_CASE("export: weights a dtype flushes to zero are counted in a warning, naming the first tensor", "[unit]") {
  auto dir = test::scratch_dir("ckpt_export_underflow");
  auto cfg = gpt_run_cfg();
  auto model = build(cfg, 7);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      if (p.key() == "transformer.h.1.mlp.c_proj.bias") p.value().fill_(1e-9);  // 0 in fp16, kept in bf16
      else p.value().clamp_(-1.0, 1.0).masked_fill_(p.value().abs().lt(1e-4), 1e-3);  // nothing else that small
    }
  }
  save_model_checkpoint(dir, 3, cfg, *model);
  auto r = test::run_trainer("export " + (dir / "step-3").string() + " --out " + (dir / "h.safetensors").string() +
                             " --dtype fp16");
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("warning: --dtype fp16: 32 nonzero value(s) (the first in transformer.h.1.mlp.c_proj.bias) are "
                      "below fp16's smallest magnitude and become 0; bf16 keeps fp32's range\n") != std::string::npos);
  r = test::run_trainer("export " + (dir / "step-3").string() + " --out " + (dir / "b.safetensors").string() +
                        " --dtype bf16");
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("warning") == std::string::npos);
}

TEST_CASE("export: an output named like a pickle (.pt, .pth, .bin) is refused before anything is read", "[unit]") {
  auto dir = test::scratch_dir("ckpt_export_pickle_name");
  for (const char* ext : {".pt", ".pth", ".bin"}) {
    const auto out = dir / (std::string("w") + ext);
    auto r = test::run_trainer("export " + (dir / "nothing").string() + " --out " + out.string());
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("--out " + out.string() + ": export writes safetensors (safetensors.torch.load_file reads it), "
                        "not a pickle that torch.load reads; name it .safetensors") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }
}

TEST_CASE("export: a corrupted checkpoint is refused with the checksum error", "[unit]") {
  auto dir = test::scratch_dir("ckpt_export_corrupt");
  auto cfg = gpt_run_cfg();
  auto model = build(cfg, 1);
  auto step_dir = save_model_checkpoint(dir, 4, cfg, *model);
  test::flip_byte(step_dir / "model.safetensors", 200);
  auto r = test::run_trainer("export " + dir.string() + " --out " + (dir / "x.safetensors").string());
  CHECK(r.exit_code == 1);
  // the checkpoints folder holds nothing that verifies, so resolution already says why
  CHECK_THAT(r.output, Catch::StartsWith("error: " + dir.string() + ": no complete checkpoint"));
  CHECK_THAT(r.output, Catch::Contains((step_dir / "model.safetensors").string() + ": checksum mismatch: expected sha256 "));
  r = test::run_trainer("export " + step_dir.string() + " --out " + (dir / "x.safetensors").string());
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::StartsWith("error: " + (step_dir / "model.safetensors").string() + ": checksum mismatch"));
  CHECK_FALSE(fs::exists(dir / "x.safetensors"));
}

TEST_CASE("export: command-line mistakes exit 2, a missing checkpoint exits 1 naming it", "[unit]") {
  auto dir = test::scratch_dir("ckpt_export_usage");
  auto r = test::run_trainer("export " + dir.string() + " --out " + (dir / "x.safetensors").string() + " --dtype int8");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("int8"));
  CHECK(engine::cmd_export(dir.string(), (dir / "x.safetensors").string(), "fp64") == 2);
  r = test::run_trainer("export " + dir.string() + " --out " + dir.string());  // a folder: refused before reading
  CHECK(r.exit_code == 2);
  CHECK(r.output == "error: --out " + dir.string() + ": is a folder; name the file to write in it\n");
  // a device or a FIFO is not replaced by the atomic write's rename (run as root it replaced /dev/null)
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  for (const auto& [target, kind] : std::vector<std::pair<std::string, std::string>>{
           {"/dev/null", "a character device"}, {(dir / "fifo").string(), "a FIFO (named pipe)"}}) {
    r = test::run_trainer("export " + dir.string() + " --out " + target);
    CHECK(r.exit_code == 2);
    CHECK(r.output == "error: --out " + target + ": is " + kind + ", not a regular file; name a file to write\n");
  }
  struct stat st {};
  CHECK((::stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode)));
  CHECK((::stat((dir / "fifo").c_str(), &st) == 0 && S_ISFIFO(st.st_mode)));
  r = test::run_trainer("export " + (dir / "nope").string() + " --out " + (dir / "x.safetensors").string());
  CHECK(r.exit_code == 1);
  CHECK(r.output == "error: " + (dir / "nope").string() + ": no such checkpoint or folder\n");
}

TEST_CASE("export: weights that do not fit the checkpoint's own config are refused", "[unit]") {
  auto dir = test::scratch_dir("ckpt_export_mismatch");
  auto cfg = gpt_run_cfg();
  auto model = build(cfg, 2);
  auto bigger = cfg;
  bigger.model.n_layer = 3;  // the config says 3 blocks, the weights have 2
  save_model_checkpoint(dir, 1, bigger, *model);
  try {
    engine::export_checkpoint((dir / "step-1").string(), (dir / "x.safetensors").string(), "fp32");
    FAIL("export accepted weights of the wrong shape");
  } catch (const io::SafetensorsError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("transformer.h.2.attn.c_attn.weight"));
  }
  CHECK_FALSE(fs::exists(dir / "x.safetensors"));
}

TEST_CASE("export interop fixture: resnet18 + gpt + vit exports with reference logits", "[unit][interop]") {
  // For tests/python/test_export_interop.py: <arch>_<dtype>.safetensors written by `trainer export`, and
  // <arch>_io.safetensors with an input, the C++ logits of the fp32 model, and the C++ logits of the same
  // model with its weights rounded to bf16 (what PyTorch computes after loading the bf16 file into fp32).
  auto dir = test::scratch_dir("ckpt_export_interop");
  for (const auto& [arch, cfg] : {std::pair{"resnet18", resnet_run_cfg()}, std::pair{"gpt", gpt_run_cfg()},
                                  std::pair{"vit", vit_run_cfg()}}) {
    INFO(arch);
    auto model = build(cfg, 21);
    torch::Tensor input = cfg.model.arch == "gpt" ? torch::randint(64, {2, 16}) : torch::randn({2, 3, 32, 32});
    if (cfg.model.arch == "resnet") warm_batchnorm(*model);
    model->eval();
    torch::NoGradGuard no_grad;
    if (cfg.model.arch == "vit") {
      input = torch::randn({2, 1, 28, 28});
      for (auto& p : model->named_parameters())  // torchvision's zero head would give all-zero logits
        if (p.key().starts_with("heads.head.")) p.value().normal_(0.0, 0.5);
    }
    auto ckpt = save_model_checkpoint(dir / (std::string(arch) + "_checkpoints"), 7, cfg, *model);
    auto logits = model->forward(input);
    for (const std::string dtype : {"fp32", "bf16"}) {
      auto r = test::run_trainer("export " + ckpt.string() + " --out " +
                                 (dir / (std::string(arch) + "_" + dtype + ".safetensors")).string() + " --dtype " + dtype);
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
    }
    for (auto& p : model->parameters()) p.copy_(p.to(torch::kBFloat16).to(torch::kFloat));
    for (auto& b : model->buffers())
      if (b.is_floating_point()) b.copy_(b.to(torch::kBFloat16).to(torch::kFloat));
    auto logits_bf16 = model->forward(input);
    io::save_safetensors((dir / (std::string(arch) + "_io.safetensors")).string(),
                         {{"input", input}, {"logits_fp32", logits}, {"logits_bf16", logits_bf16}});
    CHECK(fs::exists(dir / (std::string(arch) + "_bf16.safetensors")));
  }
}
