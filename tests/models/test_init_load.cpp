// model.init (models/init_load.hpp): what is loaded, skipped, renamed, re-initialised; the errors.
// The torch.save (.pth) files and their hostile variants are written by Python: tests/python/test_finetune.py.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <limits>

#include "model_test_util.hpp"
#include "models/init_load.hpp"
#include "test_util.hpp"

using namespace trainer;

namespace {

void check_same_state(const torch::nn::Module& a, const torch::nn::Module& b, const std::string& except = "") {
  auto sa = io::named_state(a), sb = io::named_state(b);
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    INFO(sa[i].first);
    CHECK(sa[i].first == sb[i].first);
    if (!except.empty() && sa[i].first.rfind(except, 0) == 0) continue;
    CHECK(torch::equal(sa[i].second, sb[i].second));
  }
}

}  // namespace

TEST_CASE("model.init loads a saved model exactly (resnet, tied gpt, vit)", "[unit]") {
  auto dir = test::scratch_dir("models_init_load");
  for (auto cfg : {test::resnet_cfg(20), test::tiny_gpt_cfg(), test::tiny_vit_cfg()}) {
    INFO(cfg.arch);
    auto a = test::make_model(cfg, 1);
    const auto path = (dir / (cfg.arch + ".safetensors")).string();
    io::save_safetensors(path, io::named_state(*a));
    auto b = test::make_model(cfg, 2);  // a different seed: every value must come from the file
    config::InitConfig init;
    const auto r = models::load_init_weights(*b, init, path);
    check_same_state(*a, *b);
    CHECK(r.format == "safetensors");
    CHECK(r.loaded.size() == io::named_state(*a).size());
    CHECK(r.missing.empty());
    CHECK(r.unexpected.empty());
  }
}

TEST_CASE("model.init with a file of another model names the file and every mismatch", "[unit]") {
  auto dir = test::scratch_dir("models_init_mismatch");
  const auto path = (dir / "r8.safetensors").string();
  auto cfg = test::resnet_cfg(8, 4);
  io::save_safetensors(path, io::named_state(*test::make_model(cfg)));
  cfg.num_classes = 5;
  auto model = test::make_model(cfg);
  config::InitConfig init;
  CHECK_THROWS_WITH(models::load_init_weights(*model, init, path),
                    path + ": does not match the model; mis-shaped (2): fc.weight: file [4, 64], model [5, 64], "
                           "fc.bias: file [4], model [5] (model.init.reinit_mismatched: true keeps the model's "
                           "initialisation there)");
  const auto missing = (dir / "missing.safetensors").string();
  CHECK_THROWS_WITH(models::load_init_weights(*model, init, missing), missing + ": cannot open: No such file or directory");
}

TEST_CASE("model.init reinit_mismatched keeps the new head's own initialisation and loads the rest", "[unit]") {
  auto dir = test::scratch_dir("models_init_reinit");
  const auto path = (dir / "r8.safetensors").string();
  auto src_cfg = test::resnet_cfg(8, 4);
  auto src = test::make_model(src_cfg, 1);
  io::save_safetensors(path, io::named_state(*src));
  auto cfg = test::resnet_cfg(8, 3);
  auto fresh = test::make_model(cfg, 2);
  auto model = test::make_model(cfg, 2);  // the same seed: its head must equal `fresh`'s
  config::InitConfig init;
  init.reinit_mismatched = true;
  const auto r = models::load_init_weights(*model, init, path);
  CHECK(r.reinitialised == std::vector<std::string>{"fc.weight: file [4, 64], model [3, 64]", "fc.bias: file [4], model [3]"});
  CHECK(r.loaded.size() == io::named_state(*src).size() - 2);
  auto sm = io::named_state(*model), ss = io::named_state(*src), sf = io::named_state(*fresh);
  for (size_t i = 0; i < sm.size(); ++i) {
    INFO(sm[i].first);
    if (sm[i].first.rfind("fc.", 0) == 0) CHECK(torch::equal(sm[i].second, sf[i].second));
    else CHECK(torch::equal(sm[i].second, ss[i].second));
  }
}

TEST_CASE("model.init rename, skip and strict: a module.-prefixed file with extra keys", "[unit]") {
  auto dir = test::scratch_dir("models_init_rename");
  const auto path = (dir / "ddp.safetensors").string();
  auto cfg = test::resnet_cfg(8, 4);
  auto src = test::make_model(cfg, 1);
  std::vector<std::pair<std::string, torch::Tensor>> ddp;
  for (auto& [n, t] : io::named_state(*src)) ddp.emplace_back("module." + n, t);
  ddp.emplace_back("aux_head.weight", torch::ones({2, 2}));
  io::save_safetensors(path, ddp);

  auto model = test::make_model(cfg, 2);
  config::InitConfig init;
  init.rename = {{"module.", ""}};
  // strict: the extra tensor is unexpected, nothing is copied
  CHECK_THROWS_WITH(models::load_init_weights(*model, init, path),
                    Catch::Contains("unexpected (1): aux_head.weight (model.init.skip or model.init.rename"));
  CHECK_FALSE(torch::equal(io::named_state(*model)[0].second, io::named_state(*src)[0].second));
  init.skip = {"^aux_", R"(^module\.fc\.)"};
  const auto r = models::load_init_weights(*model, init, path);
  CHECK(r.skipped == std::vector<std::string>{"module.fc.weight", "module.fc.bias", "aux_head.weight"});
  CHECK(r.renamed.size() == ddp.size() - 3);
  const std::pair<std::string, std::string> conv1{"module.conv1.weight", "conv1.weight"};
  CHECK(std::find(r.renamed.begin(), r.renamed.end(), conv1) != r.renamed.end());
  CHECK(r.missing.empty());  // a skipped name is not missing: the model keeps its initialisation there
  auto fresh = test::make_model(cfg, 2);
  auto sm = io::named_state(*model), ss = io::named_state(*src), sf = io::named_state(*fresh);
  for (size_t i = 0; i < sm.size(); ++i) {
    INFO(sm[i].first);
    CHECK(torch::equal(sm[i].second, sm[i].first.rfind("fc.", 0) == 0 ? sf[i].second : ss[i].second));
  }
  // without the rename nothing matches: every name missing, every file name unexpected (non-strict: loaded nothing)
  config::InitConfig loose;
  loose.strict = false;
  const auto r2 = models::load_init_weights(*model, loose, path);
  CHECK(r2.loaded.empty());
  CHECK(r2.unexpected.size() == ddp.size());
  CHECK(r2.missing.size() == sm.size());
}

TEST_CASE("model.init: a file that is neither safetensors nor torch.save is an error naming it", "[unit]") {
  auto dir = test::scratch_dir("models_init_garbage");
  auto model = test::make_model(test::resnet_cfg(8, 4));
  const auto zip = (dir / "cut.pth").string();
  std::ofstream(zip, std::ios::binary) << std::string("PK\x03\x04", 4) << std::string(100, 'x');
  CHECK_THROWS_WITH(models::load_init_weights(*model, {}, zip),
                    Catch::StartsWith(zip + ": not a readable torch.save zip archive (truncated or corrupt?)"));
  const auto legacy = (dir / "legacy.pth").string();
  std::ofstream(legacy, std::ios::binary) << std::string("\x80\x02\x8a\x0a", 4) << std::string(60, '\0');
  CHECK_THROWS_WITH(models::load_init_weights(*model, {}, legacy),
                    Catch::StartsWith(legacy + ": a legacy torch.save file (not the zip format"));
  const auto text = (dir / "notes.bin").string();
  std::ofstream(text, std::ios::binary) << "just some text, not weights at all";
  CHECK_THROWS_WITH(models::load_init_weights(*model, {}, text),
                    Catch::StartsWith(text + ": ") && Catch::EndsWith("(read as safetensors: it is no torch.save zip archive)"));
}

// NaN or infinite weights were loaded without a word; the run failed at its fifth step advising a lower
// learning rate. Refused, naming each tensor and how many of its values.
TEST_CASE("model.init refuses NaN or infinite weights, naming the tensors", "[unit]") {
  auto dir = test::scratch_dir("models_init_nonfinite");
  const auto cfg = test::resnet_cfg(8, 4);
  auto state = io::named_state(*test::make_model(cfg));
  for (auto& [name, t] : state) {
    if (name == "conv1.weight") t = t.clone().fill_(std::numeric_limits<float>::quiet_NaN());
    if (name == "fc.bias") (t = t.clone())[1] = std::numeric_limits<float>::infinity();
  }
  const auto path = (dir / "nan.safetensors").string();
  io::save_safetensors(path, state);
  auto model = test::make_model(cfg);
  config::InitConfig init;
  const int64_t conv = model->named_parameters()["conv1.weight"].numel();
  CHECK_THROWS_WITH(models::load_init_weights(*model, init, path),
                    Catch::Contains(path + ": does not match the model; NaN or infinite values (2): ") &&
                        Catch::Contains("conv1.weight (" + std::to_string(conv) + " of " + std::to_string(conv) + ")") &&
                        Catch::Contains("fc.bias (1 of 4)"));
}
