#include "data/prepare_text.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <vector>

#include <fmt/format.h>

#include "config/exit_codes.hpp"
#include "data/dataset.hpp"
#include "data/file_util.hpp"

namespace trainer::data {
namespace {
namespace fs = std::filesystem;


// Shards of `bytes` (one token per byte) named PREFIX_000000.bin, ...; returns the shard count.
int64_t write_shards(const fs::path& dir, const std::string& prefix, const uint8_t* bytes, int64_t n,
                     int64_t shard_tokens) {
  std::vector<uint16_t> tokens;
  int64_t shards = 0;
  for (int64_t start = 0; start < n; start += shard_tokens, ++shards) {
    int64_t count = std::min(shard_tokens, n - start);
    tokens.assign(bytes + start, bytes + start + count);
    write_llmc_shard((dir / fmt::format("{}_{:06d}.bin", prefix, shards)).string(), tokens.data(), count);
  }
  return shards;
}

// The shard files (train_NNNNNN.bin, val_NNNNNN.bin) already in `dir`, sorted.
std::vector<fs::path> existing_shards(const fs::path& dir) {
  static const std::regex name(R"((train|val)_[0-9]{6}\.bin)");
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (std::regex_match(it->path().filename().string(), name)) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void write_llmc_shard(const std::string& path, const uint16_t* tokens, int64_t count) {
  std::array<int32_t, 256> header{};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(count);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header.data()), sizeof(header));  // little-endian hosts only
    out.write(reinterpret_cast<const char*>(tokens), count * 2);
    if (!out) throw DataError(path + ": cannot write");
  }
  fs::rename(tmp, path);  // no half-written shard under the final name
}

int cmd_prepare_text(const std::string& input, const std::string& out_dir, int64_t shard_tokens, double val_fraction,
                     bool force) {
  if (shard_tokens < 1 || shard_tokens > INT32_MAX || !(val_fraction >= 0.0 && val_fraction < 1.0)) {  // nan too
    std::cerr << "prepare-text: --shard-tokens must be in [1, 2^31) and --val-fraction in [0, 1)\n";
    return kExitUsage;
  }
  // --out is a folder: a file there (the input itself, found from outside) or above it failed later as
  // "filesystem error: cannot create directories: Not a directory", exit 1
  std::error_code ec;
  for (fs::path p = out_dir; !p.empty(); p = p.parent_path()) {
    if (fs::exists(p, ec) && !fs::is_directory(p, ec)) {
      std::cerr << "prepare-text: --out " << out_dir << ": " << p.string()
                << " is a file; --out names the folder the shards go to\n";
      return kExitUsage;
    }
    if (fs::exists(p, ec) || p == p.parent_path()) break;
  }
  // a folder's shards are all read as one corpus: earlier ones left beside the new would be mixed in
  const auto before = existing_shards(out_dir);
  if (!before.empty() && !force) {
    std::cerr << "prepare-text: " << out_dir << " already holds " << before.size() << " shard file(s) ("
              << before.front().filename().string() << (before.size() > 1 ? ", ..." : "")
              << "); a run reading the folder would mix them with the new ones: choose another --out, or --force "
                 "to replace them\n";
    return kExitUsage;
  }
  try {
    std::vector<uint8_t> bytes;
    {
      MappedFile in(input);
      bytes.assign(in.data(), in.data() + in.size());
    }
    if (bytes.empty()) throw DataError(input + ": the file is empty");
    const int64_t n = static_cast<int64_t>(bytes.size());
    const int64_t n_val = static_cast<int64_t>(static_cast<double>(n) * val_fraction), n_train = n - n_val;
    fs::create_directories(out_dir);
    int64_t train_shards = write_shards(out_dir, "train", bytes.data(), n_train, shard_tokens);
    int64_t val_shards = write_shards(out_dir, "val", bytes.data() + n_train, n_val, shard_tokens);
    int64_t removed = 0;  // --force: the earlier shards the new ones did not replace
    for (const auto& p : before) {
      const std::string f = p.filename().string();
      const bool train = f.rfind("train_", 0) == 0;
      const int64_t index = std::stoll(f.substr(train ? 6 : 4, 6));
      if (index >= (train ? train_shards : val_shards)) removed += fs::remove(p) ? 1 : 0;
    }
    if (removed > 0) std::cout << fmt::format("removed {} earlier shard file(s) of {}\n", removed, out_dir);
    std::cout << fmt::format("{}: {} bytes -> {}: {} train tokens in {} shard(s), {} val tokens in {} shard(s) "
                             "(byte-level, vocab 256, llm.c format)\n",
                             input, n, out_dir, n_train, train_shards, n_val, val_shards);
    return kExitOk;
  } catch (const std::exception& e) {
    std::cerr << "prepare-text: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace trainer::data
