// text: a raw file, one token per byte (vocab 256); validation = the contiguous tail of
//       data.val_fraction of the bytes, or the whole of data.val_path.
// tokens: pre-tokenised shards, memory-mapped. data.path is a file, a glob ("dir/train_*.bin") or a
//       folder (its train_*.bin files, validation its val_*.bin files). Each file is either llm.c's
//       format (256 x int32 header: magic 20240520, version 1, token count; then uint16 tokens) or
//       nanoGPT's headerless uint16 array; told apart by the magic. Validation: data.val_path (same
//       forms), else the folder's val_*.bin, else the tail of data.val_fraction of the tokens.
#include <algorithm>
#include <bit>
#include <filesystem>

#include <fmt/format.h>

#include "data/readers.hpp"
#include "data/prepare_text.hpp"
#include "data/token_dataset.hpp"

namespace trainer::data {
namespace {
namespace fs = std::filesystem;

constexpr uint32_t kLlmcMagicUint32 = 20240801;  // llm.c's llama3 shards (uint32 tokens): not supported

// Every token of the shard must be below model.vocab_size: checked when the data is opened (also by
// `trainer check`), not at the step whose batch happens to read it. A max over the mapped uint16
// array, in parallel chunks (memory-bound); the slow search for the first offender only on failure.
void check_vocab(const TokenSegment& s, int64_t vocab) {
  static_assert(std::endian::native == std::endian::little, "token shards are little-endian uint16");
  if (vocab > 65535 || s.count == 0) return;  // no uint16 token can be out of range
  const auto* tok = reinterpret_cast<const uint16_t*>(s.file->data() + s.header_bytes);  // 2-aligned
  const uint16_t max = at::parallel_reduce(
      int64_t{0}, s.count, int64_t{1} << 20, uint16_t{0},
      [&](int64_t begin, int64_t end, uint16_t m) {
        auto chunk = [&] {  // the mapped file may be truncated under us: a guarded read
          for (int64_t i = begin; i < end; ++i) m = std::max(m, tok[i]);
        };
        s.file->guarded(chunk);
        return m;
      },
      [](uint16_t a, uint16_t b) { return std::max(a, b); });
  if (max < vocab) return;
  int64_t pos = 0;
  auto find = [&] { pos = std::find_if(tok, tok + s.count, [&](uint16_t t) { return t >= vocab; }) - tok; };
  s.file->guarded(find);
  uint16_t bad = 0;
  s.file->copy(&bad, s.header_bytes + 2 * pos, 2);
  throw DataError(fmt::format("{}: token {} at byte offset {} (token {} of the file) is outside the vocabulary "
                              "[0, {}) (model.vocab_size)",
                              s.file->path(), bad, s.header_bytes + 2 * pos, pos, vocab));
}

TokenSegment open_shard(const std::string& path) {
  auto file = std::make_shared<const MappedFile>(path);
  TokenSegment s;
  s.file = file;
  int64_t size = file->size();
  uint8_t header[kLlmcHeaderBytes] = {};  // read through a guarded copy (the file may shrink under us)
  file->copy(header, 0, std::min<int64_t>(size, kLlmcHeaderBytes));
  const uint8_t* d = header;
  uint32_t magic = size >= 4 ? read_le32(d) : 0;
  if (size >= kLlmcHeaderBytes && magic == static_cast<uint32_t>(kLlmcMagic)) {
    uint32_t version = read_le32(d + 4);
    if (version != 1)
      throw DataError(fmt::format("{}: llm.c token shard version {}, only version 1 (uint16 tokens) is supported",
                                  path, version));
    int64_t count = read_le32(d + 8);
    if (size != kLlmcHeaderBytes + 2 * count)
      throw DataError(fmt::format("{}: truncated or corrupt llm.c shard: the header says {} tokens ({} bytes), the "
                                  "file has {} bytes",
                                  path, count, kLlmcHeaderBytes + 2 * count, size));
    s.header_bytes = kLlmcHeaderBytes;
    s.count = count;
    return s;
  }
  if (size >= kLlmcHeaderBytes && magic == kLlmcMagicUint32)
    throw DataError(fmt::format("{}: wrong magic number {} (llm.c uint32-token shard); expected {} (llm.c uint16) or "
                                "a headerless uint16 file",
                                path, magic, kLlmcMagic));
  // an llm.c header whose magic alone is wrong (version 1, the token count the size gives): a damaged
  // shard, not nanoGPT's headerless array (its 1024 header bytes were read as 512 tokens)
  if (size >= kLlmcHeaderBytes && read_le32(d + 4) == 1 && 2 * static_cast<int64_t>(read_le32(d + 8)) == size - kLlmcHeaderBytes)
    throw DataError(fmt::format("{}: an llm.c shard header (version 1, {} tokens) with the magic number {}, not {}: "
                                "a damaged shard (write it again), not a headerless uint16 file",
                                path, read_le32(d + 8), magic, kLlmcMagic));
  if (size % 2 != 0)
    throw DataError(fmt::format("{}: {} bytes is odd: not a headerless uint16 token file (and no llm.c magic {})",
                                path, size, kLlmcMagic));
  s.count = size / 2;  // nanoGPT: headerless uint16
  return s;
}

std::vector<std::string> shard_files(const std::string& spec, const std::string& prefix) {
  if (fs::is_directory(spec)) {
    auto files = expand_glob((fs::path(spec) / (prefix + "_*.bin")).string());
    if (files.empty() && prefix == "train") files = expand_glob((fs::path(spec) / "*.bin").string());
    return files;
  }
  return expand_glob(spec);
}

std::vector<TokenSegment> open_shards(const std::vector<std::string>& files, int64_t vocab) {
  std::vector<TokenSegment> segs;
  for (const auto& f : files) {
    segs.push_back(open_shard(f));
    check_vocab(segs.back(), vocab);
  }
  return segs;
}

TokenSegment open_bytes(const std::string& path) {
  if (path.empty() || !fs::exists(path)) throw DataError(fmt::format("{}: no such file (data.format text)", path));
  TokenSegment s;
  s.file = std::make_shared<const MappedFile>(path);
  s.bytes_per_token = 1;
  s.count = s.file->size();
  return s;
}

// A file, or the files a glob matches (sorted), one after the other: CONFIG.md's "file, folder or glob"
// for data.path. The check at start accepted a glob and the run then said "no such file".
std::vector<TokenSegment> open_text_files(const std::string& path) {
  if (!path.empty() && fs::exists(path)) return {open_bytes(path)};
  const auto files = path.empty() ? std::vector<std::string>{} : expand_glob(path);
  if (files.empty()) throw DataError(fmt::format("{}: no such file, or no files match (data.format text)", path));
  std::vector<TokenSegment> segs;
  for (const auto& f : files) segs.push_back(open_bytes(f));
  return segs;
}

}  // namespace

DatasetPair open_text(const config::DataConfig& data, int64_t block_size) {
  constexpr int64_t kByteVocab = 256;
  const std::vector<TokenSegment> segs = open_text_files(data.path);
  DatasetPair pair;
  if (!data.val_path.empty()) {
    pair.train = std::make_shared<TokenDataset>("text", segs, block_size, kByteVocab);
    pair.val = std::make_shared<TokenDataset>("text", open_text_files(data.val_path), block_size, kByteVocab);
    return pair;
  }
  int64_t total = 0;
  for (const auto& s : segs) total += s.count;
  auto [head, tail] = split_tail(segs, data.val_fraction);
  pair.train = std::make_shared<TokenDataset>("text", head, block_size, kByteVocab, data.path);
  if (!tail.empty())
    pair.val = std::make_shared<TokenDataset>(
        "text", tail, block_size, kByteVocab,
        fmt::format("{} (its validation tail, data.val_fraction {:g} of {} bytes)", data.path, data.val_fraction, total));
  return pair;
}

DatasetPair open_tokens(const config::DataConfig& data, int64_t block_size, int64_t vocab_size) {
  if (data.path.empty()) throw DataError("data.path is empty (data.format tokens wants a file, glob or folder)");
  auto train_files = shard_files(data.path, "train");
  if (train_files.empty()) throw DataError(fmt::format("{}: no such file, or no files match (data.format tokens)", data.path));
  std::vector<TokenSegment> train = open_shards(train_files, vocab_size), val;
  if (!data.val_path.empty()) {
    auto files = shard_files(data.val_path, "val");
    if (files.empty()) throw DataError(fmt::format("{}: no such file, or no files match (data.val_path)", data.val_path));
    val = open_shards(files, vocab_size);
  } else if (fs::is_directory(data.path)) {
    val = open_shards(shard_files(data.path, "val"), vocab_size);
  }
  if (val.empty() && data.val_path.empty() && data.val_fraction > 0) std::tie(train, val) = split_tail(train, data.val_fraction);
  DatasetPair pair;
  pair.train = std::make_shared<TokenDataset>("tokens", train, block_size, vocab_size, data.path);
  if (!val.empty())
    pair.val = std::make_shared<TokenDataset>("tokens", val, block_size, vocab_size, data.val_path);
  return pair;
}

}  // namespace trainer::data
