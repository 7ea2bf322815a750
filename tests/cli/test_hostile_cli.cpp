// Hostile files given to the binary (issue 18, items 6 and 8a): a FIFO or device as the config, a
// data file, init_from or a checkpoint manifest exits at once with the file named (under `timeout`,
// so a regression fails instead of hanging); out-of-range token ids are caught by `trainer check`.
#include <catch2/catch.hpp>

#include "data/prepare_text.hpp"
#include "hostile_util.hpp"
#include "test_util.hpp"
#include "skip.hpp"

using namespace trainer::test;
namespace fs = std::filesystem;

namespace {

const char* kRefused = ", not a regular file (refusing to read it: it may block or never end)";

// A tiny GPT config reading `data_path` (format tokens), optionally initialised from `init_from`.
std::string tokens_config(const fs::path& data_path, const std::string& init_from = "") {
  return "run: {name: hostile, seed: 0}\n"
         "model: {arch: gpt, vocab_size: 64, block_size: 8, n_layer: 1, n_head: 2, n_embd: 16" +
         (init_from.empty() ? std::string() : ", init_from: " + init_from) +
         "}\n"
         "data: {format: tokens, path: " + data_path.string() + ", val_fraction: 0, workers: 1}\n"
         "train: {batch_size: 2, max_steps: 3, device: cpu, threads: 1}\n"
         "log: {progress: off}\n";
}

void write_good_shard(const fs::path& p) {
  std::vector<uint16_t> toks(400);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>(i % 64);
  trainer::data::write_llmc_shard(p.string(), toks.data(), toks.size());
}

}  // namespace

TEST_CASE("cli: a FIFO or a device as the config file exits 2 at once naming it", "[e2e]") {
  auto dir = scratch_dir("cli_fifo_config");
  if (!make_fifo(dir / "exp.yaml")) {
    TRAINER_SKIP("cannot create a FIFO here");
  }
  for (const char* cmd : {"check", "run"}) {
    auto r = run_trainer(std::string(cmd) + " " + (dir / "exp.yaml").string(), timeout_prefix(60));
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find((dir / "exp.yaml").string() + ": is a FIFO (named pipe)" + kRefused) != std::string::npos);
  }
  auto r = run_trainer("check /dev/zero", timeout_prefix(60));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(std::string("/dev/zero: is a character device") + kRefused) != std::string::npos);
}

TEST_CASE("cli: a FIFO as a data file or init_from is a config error at once naming it", "[e2e]") {
  auto dir = scratch_dir("cli_fifo_data");
  if (!make_fifo(dir / "fifo.bin")) {
    TRAINER_SKIP("cannot create a FIFO here");
  }
  write_file(dir / "data.yaml", tokens_config(dir / "fifo.bin"));
  auto r = run_trainer("check " + (dir / "data.yaml").string(), timeout_prefix(60));
  INFO(r.output);
  // looked at before anything is read or made (it had been exit 1 from the reader)
  const std::string not_file = ": is a FIFO (named pipe), not a regular file or folder";
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("data.path: " + (dir / "fifo.bin").string() + not_file) != std::string::npos);

  write_good_shard(dir / "good.bin");
  REQUIRE(make_fifo(dir / "init.safetensors"));
  write_file(dir / "init.yaml", tokens_config(dir / "good.bin", (dir / "init.safetensors").string()));
  for (const char* cmd : {"check", "run"}) {
    auto ri = run_trainer(std::string(cmd) + " " + (dir / "init.yaml").string() + " --out-dir " +
                              (dir / "runs").string(),
                          timeout_prefix(60));
    INFO(ri.output);
    CHECK(ri.exit_code == 2);
    CHECK(ri.output.find("model.init_from: " + (dir / "init.safetensors").string() + not_file) != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "runs"));
  }
}

TEST_CASE("cli: export of a checkpoint whose manifest is a FIFO or /dev/zero exits 1 at once naming it", "[e2e]") {
  auto dir = scratch_dir("cli_fifo_manifest");
  const fs::path step = dir / "ckpts" / "step-1", manifest = step / "manifest.json";
  fs::create_directories(step);
  if (!make_fifo(manifest)) {
    TRAINER_SKIP("cannot create a FIFO here");
  }
  auto r = run_trainer("export " + step.string() + " --out " + (dir / "out.safetensors").string(), timeout_prefix(60));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find(manifest.string() + ": is a FIFO (named pipe)" + kRefused) != std::string::npos);
  fs::remove(manifest);
  fs::create_symlink("/dev/zero", manifest);
  r = run_trainer("export " + step.string() + " --out " + (dir / "out.safetensors").string(), timeout_prefix(60));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find(manifest.string() + ": is a character device" + kRefused) != std::string::npos);
}

TEST_CASE("cli: check catches a token id beyond model.vocab_size, naming the file and offset", "[e2e]") {
  auto dir = scratch_dir("cli_token_range");
  std::vector<uint16_t> toks(400, 1);
  toks[300] = 64;  // vocab_size is 64
  trainer::data::write_llmc_shard((dir / "train.bin").string(), toks.data(), toks.size());
  write_file(dir / "exp.yaml", tokens_config(dir / "train.bin"));
  for (const char* cmd : {"check", "run"}) {
    auto r = run_trainer(std::string(cmd) + " " + (dir / "exp.yaml").string() + " --out-dir " + (dir / "runs").string(),
                         timeout_prefix(180));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find((dir / "train.bin").string() +
                        ": token 64 at byte offset 1624 (token 300 of the file) is outside the vocabulary [0, 64) "
                        "(model.vocab_size)") != std::string::npos);
  }
}
