// Parsing, overrides, defaults, path resolution, dump/load round trip, hashes, docs coverage.
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>

#include "config/load.hpp"
#include "config/schema.hpp"
#include "test_util.hpp"

using namespace trainer::config;
namespace fs = std::filesystem;

TEST_CASE("an empty file gives the declared defaults", "[unit]") {
  auto loaded = load_config_text("", "empty.yaml");
  REQUIRE(loaded.cfg == RunConfig{});
  REQUIRE(loaded.explicit_keys.empty());
}

TEST_CASE("values of every type are parsed into the structs", "[unit]") {
  auto loaded = load_config_text(
      "run: {name: exp1, seed: 7, deterministic: true}\n"
      "model:\n  arch: gpt\n  n_layer: 4\n  dropout: 0.25\n  bias: false\n  attention: math\n"
      "data:\n  format: synthetic\n  augment:\n    hflip: true\n  normalize:\n    mean: [0.5]\n    std: [0.25]\n"
      "optim: {name: adamw, lr: 3e-4, betas: [0.8, 0.95]}\n"
      "train: {max_steps: 100, early_stopping: {metric: loss, patience: 3}}\n",
      "exp.yaml");
  const auto& c = loaded.cfg;
  CHECK(c.run.name == "exp1");
  CHECK(c.run.seed == 7);
  CHECK(c.run.deterministic);
  CHECK(c.model.arch == "gpt");
  CHECK(c.model.n_layer == 4);
  CHECK(c.model.dropout == 0.25);
  CHECK_FALSE(c.model.bias);
  CHECK(c.model.attention == Attention::Math);
  CHECK(c.data.augment.hflip);
  CHECK(c.data.normalize.mean == std::vector<double>{0.5});
  CHECK(c.data.normalize.std == std::vector<double>{0.25});
  CHECK(c.optim.name == OptimizerKind::Adamw);
  CHECK(c.optim.lr == 3e-4);
  CHECK(c.optim.betas == std::vector<double>{0.8, 0.95});
  CHECK(c.train.max_steps == 100);
  CHECK(c.train.early_stopping.metric == "loss");
  CHECK(c.train.early_stopping.patience == 3);
  CHECK(loaded.is_set("optim.betas"));
  CHECK_FALSE(loaded.is_set("optim.eps"));
}

TEST_CASE("overrides are typed by the schema and win over the file", "[unit]") {
  auto loaded = load_config_text("optim:\n  lr: 0.1\n", "exp.yaml",
                                 {"optim.lr=0.05", "optim.betas=[0.5, 0.6]", "run.name=a: b", "train.max_steps=12",
                                  "data.augment.hflip=true"});
  CHECK(loaded.cfg.optim.lr == 0.05);
  CHECK(loaded.cfg.optim.betas == std::vector<double>{0.5, 0.6});
  CHECK(loaded.cfg.run.name == "a: b");  // strings are taken verbatim
  CHECK(loaded.cfg.train.max_steps == 12);
  CHECK(loaded.cfg.data.augment.hflip);
  CHECK(loaded.where("optim.lr").file == "--set optim.lr=0.05");
}

TEST_CASE("relative paths resolve against the config file's folder", "[unit]") {
  auto dir = trainer::test::scratch_dir("config_paths");
  trainer::test::write_file(dir / "sub" / "exp.yaml",
                            "run:\n  out_dir: ../runs\ndata:\n  format: idx\n  path: data/fmnist\n  val_path: /abs/val\n"
                            "train:\n  max_steps: 1\n");
  auto loaded = load_config((dir / "sub" / "exp.yaml").string());
  CHECK(loaded.cfg.run.out_dir == (dir / "runs").lexically_normal().string());
  CHECK(loaded.cfg.data.path == (dir / "sub" / "data" / "fmnist").string());
  CHECK(loaded.cfg.data.val_path == "/abs/val");
}

TEST_CASE("the dumped config loads back into the identical struct", "[unit]") {
  auto loaded = load_config_text(
      "run: {name: rt, seed: 3}\nmodel: {arch: gpt, n_embd: 96, n_head: 3, dropout: 0.1}\n"
      "optim: {name: adamw, lr: 0.000123456789, betas: [0.9, 0.95], eps: 1e-10}\n"
      "data: {format: text, path: /tmp/x.txt, val_fraction: 0.05}\ntrain: {max_steps: 7, grad_clip: 1.0}\n",
      "rt.yaml");
  std::string text = dump_yaml(loaded.cfg);
  auto again = load_config_text(text, "config.yaml");
  REQUIRE(again.cfg == loaded.cfg);
  REQUIRE(dump_yaml(again.cfg) == text);
  REQUIRE(config_hash(again.cfg) == config_hash(loaded.cfg));
}

TEST_CASE("batch_size auto reads as 0, dumps as auto and round-trips", "[unit]") {
  auto loaded = load_config_text("train: {batch_size: auto, global_batch_size: 96, memory_budget_gb: 1.5}\n", "a.yaml");
  CHECK(loaded.cfg.train.batch_size == 0);
  CHECK(loaded.cfg.train.memory_budget_gb == 1.5);
  std::string text = dump_yaml(loaded.cfg);
  CHECK(text.find("  batch_size: auto\n") != std::string::npos);
  auto again = load_config_text(text, "config.yaml");
  CHECK(again.cfg == loaded.cfg);
  RunConfig c = loaded.cfg;
  resolve(c, 2);  // auto: the engine derives grad_accum at start; the global batch stays
  CHECK(c.train.global_batch_size == 96);
  CHECK(c.train.batch_size == 0);
}

TEST_CASE("the hash changes with any value", "[unit]") {
  RunConfig a, b;
  b.optim.lr = a.optim.lr * (1 + 1e-12);
  REQUIRE(config_hash(a) != config_hash(b));
  REQUIRE(config_hash(a).size() == 64);
}

TEST_CASE("global_batch_size sets grad_accum, otherwise it is derived", "[unit]") {
  RunConfig c;
  c.train.batch_size = 16;
  c.train.global_batch_size = 128;
  resolve(c, 2);
  CHECK(c.train.grad_accum == 4);
  RunConfig d;
  d.train.batch_size = 16;
  d.train.grad_accum = 3;
  resolve(d, 2);
  CHECK(d.train.global_batch_size == 96);
}

TEST_CASE("did_you_mean finds close spellings and prefixes only", "[unit]") {
  CHECK(did_you_mean("lr_rate", {"name", "lr", "momentum"}) == "lr");
  CHECK(did_you_mean("momentun", {"name", "lr", "momentum"}) == "momentum");
  CHECK(did_you_mean("qqqqqq", {"name", "lr", "momentum"}).empty());
}

TEST_CASE("docs/CONFIG.md documents every key of the schema", "[unit]") {
  std::string doc = trainer::test::read_file(trainer::test::source_path("docs/CONFIG.md"));
  REQUIRE_FALSE(doc.empty());
  RunConfig cfg;
  std::vector<std::string> missing;
  for (const auto& f : describe_fields(cfg))
    if (doc.find("`" + f.key + "`") == std::string::npos) missing.push_back(f.key);
  INFO("keys missing from docs/CONFIG.md: " << [&] {
    std::string s;
    for (auto& m : missing) s += m + " ";
    return s;
  }());
  REQUIRE(missing.empty());
}

TEST_CASE("every shipped config in configs/ loads and validates", "[unit]") {
  int n = 0;
  for (const auto& e : fs::directory_iterator(trainer::test::source_path("configs"))) {
    if (e.path().extension() != ".yaml") continue;
    INFO(e.path().string());
    ValidateOptions opts;
    opts.cuda_available = true;  // the GPU configs must validate too
    REQUIRE_NOTHROW(load_and_validate(e.path().string(), {}, opts));
    ++n;
  }
  REQUIRE(n >= 4);
}
