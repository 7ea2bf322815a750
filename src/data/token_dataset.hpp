// Language-model samples over token streams: windows of block_size + 1 tokens, the input the first
// T and the target the same window shifted by one. Windows start every T tokens (so consecutive
// windows share one token) and never cross a segment (file) boundary. Tokens are read straight
// from memory-mapped files (uint8 for raw text, uint16 for shards) through a guarded copy, so a
// file truncated under the run is a DataChanged (data/file_watch.hpp), and checked against the vocab.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/file_util.hpp"

namespace trainer::data {

struct TokenSegment {
  std::shared_ptr<const MappedFile> file;  // keeps the mapping alive
  int64_t begin = 0;                       // first token (in tokens, after any header)
  int64_t count = 0;                       // tokens
  int64_t header_bytes = 0;
  int bytes_per_token = 2;                 // 1 (raw bytes) or 2 (uint16 little-endian)
};

// Splits the concatenated segments into a head and a contiguous tail of `fraction` of the tokens.
std::pair<std::vector<TokenSegment>, std::vector<TokenSegment>> split_tail(const std::vector<TokenSegment>& segs,
                                                                           double fraction);

class TokenDataset : public Dataset {
 public:
  // `origin`: what the segments came from, for the error when they hold no window (default: the first
  // segment's file).
  TokenDataset(std::string format, std::vector<TokenSegment> segments, int64_t block_size, int64_t vocab_size,
               const std::string& origin = "");

  int64_t size() const override { return total_windows_; }
  SampleKind kind() const override { return SampleKind::Tokens; }
  std::vector<int64_t> sample_shape() const override { return {block_}; }
  int64_t num_classes() const override { return vocab_; }
  std::string describe() const override;
  torch::ScalarType raw_dtype() const override { return torch::kInt64; }
  std::vector<int64_t> target_shape() const override { return {block_}; }
  bool fill(int64_t index, int64_t epoch, bool augment, void* input, int64_t* target) const override;
  torch::Tensor finish(const torch::Tensor& raw, bool pin) const override;
  void check_unchanged() const override;

 private:
  std::string format_;
  std::vector<TokenSegment> segments_;
  std::vector<int64_t> first_window_;  // (segments + 1) prefix sums of windows per segment
  int64_t block_, vocab_, total_windows_ = 0, total_tokens_ = 0;
};

}  // namespace trainer::data
