// data.workers auto: the schema's `auto` stored as -1 (0 already means "load on the training
// thread"), the default, dumped as auto; -1 written out is still out of range.
#include <catch2/catch.hpp>

#include "config/config.hpp"
#include "config/load.hpp"
#include "test_util.hpp"

using namespace trainer::config;

TEST_CASE("data.workers takes auto (the default), dumps it as auto, and still refuses -1", "[unit]") {
  using namespace trainer::config;
  auto dir = trainer::test::scratch_dir("workers_auto");
  const auto file = dir / "exp.yaml";
  trainer::test::write_file(file, "model: {arch: mlp}\ndata: {format: synthetic, workers: auto}\n");
  CHECK(load_config(file.string()).cfg.data.workers == -1);
  CHECK(RunConfig{}.data.workers == -1);
  CHECK(load_config(file.string(), {"data.workers=3"}).cfg.data.workers == 3);
  CHECK(load_config(file.string(), {"data.workers=auto"}).cfg.data.workers == -1);
  CHECK_THAT(dump_yaml(load_config(file.string()).cfg), Catch::Matchers::Contains("workers: auto"));
  trainer::test::write_file(file, "model: {arch: mlp}\ndata: {format: synthetic, workers: -1}\n");
  try {
    load_config(file.string());
    FAIL("workers: -1 was accepted");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("data.workers: value -1 is out of range [0, 256] (or auto)"));
  }
}
