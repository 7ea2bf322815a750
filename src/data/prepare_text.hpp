// `trainer prepare-text IN.txt --out DIR`: a text file -> byte-level token shards in llm.c's format
// (256 x int32 header: magic 20240520, version 1, token count; then uint16 tokens), so a corpus is
// prepared once and then memory-mapped by data.format tokens (data.path: DIR).
#pragma once

#include <cstdint>
#include <string>

namespace trainer::data {

// llm.c's token-shard header: 256 int32 words (magic, version, token count, zeros), then uint16 tokens.
inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// Writes DIR/train_000000.bin, ... (shard_tokens tokens each, the last one shorter) from the head
// of the file and DIR/val_000000.bin, ... from its contiguous tail of val_fraction. Returns an exit
// code (0 ok, 1 I/O failure, 2 bad arguments) after printing a summary or the error. A folder that
// already holds shard files is refused (2) unless `force`: then the new shards replace them and the
// earlier ones they do not replace are removed, so the folder holds one corpus.
int cmd_prepare_text(const std::string& input, const std::string& out_dir, int64_t shard_tokens, double val_fraction,
                     bool force = false);

// One shard: llm.c header + uint16 tokens. Throws DataError naming the file on failure.
void write_llmc_shard(const std::string& path, const uint16_t* tokens, int64_t count);

}  // namespace trainer::data
