#include "data/token_dataset.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace trainer::data {

std::pair<std::vector<TokenSegment>, std::vector<TokenSegment>> split_tail(const std::vector<TokenSegment>& segs,
                                                                           double fraction) {
  int64_t total = 0;
  for (const auto& s : segs) total += s.count;
  int64_t head = total - static_cast<int64_t>(static_cast<double>(total) * fraction);
  std::vector<TokenSegment> a, b;
  int64_t seen = 0;
  for (const auto& s : segs) {
    int64_t in_head = std::clamp<int64_t>(head - seen, 0, s.count);
    if (in_head > 0) {
      TokenSegment h = s;
      h.count = in_head;
      a.push_back(h);
    }
    if (in_head < s.count) {
      TokenSegment t = s;
      t.begin = s.begin + in_head;
      t.count = s.count - in_head;
      b.push_back(t);
    }
    seen += s.count;
  }
  return {a, b};
}

TokenDataset::TokenDataset(std::string format, std::vector<TokenSegment> segments, int64_t block_size,
                           int64_t vocab_size, const std::string& origin)
    : format_(std::move(format)), segments_(std::move(segments)), block_(block_size), vocab_(vocab_size) {
  first_window_.push_back(0);
  for (const auto& s : segments_) {
    total_tokens_ += s.count;
    int64_t windows = s.count > block_ ? (s.count - 1) / block_ : 0;
    first_window_.push_back(first_window_.back() + windows);
  }
  total_windows_ = first_window_.back();
  if (total_windows_ == 0) {
    const std::string where = !origin.empty()     ? origin
                              : segments_.empty() ? std::string("(no files)")
                                                  : segments_.front().file->path();
    if (total_tokens_ == 0) throw DataError(fmt::format("{}: the dataset is empty: 0 tokens", where));
    throw DataError(fmt::format("{}: too short for one sample: {} tokens, and no file segment has block_size + 1 = {}",
                                where, total_tokens_, block_ + 1));
  }
}

std::string TokenDataset::describe() const {
  std::string files = segments_.front().file->path();
  size_t nfiles = 1;
  for (size_t i = 1; i < segments_.size(); ++i)
    if (segments_[i].file != segments_[i - 1].file) ++nfiles;
  if (nfiles > 1) files += fmt::format(" (+{} more files)", nfiles - 1);
  return fmt::format("{} {}: {} tokens, {} windows of {}+1, vocab {}", format_, files, total_tokens_, total_windows_,
                     block_, vocab_);
}

bool TokenDataset::fill(int64_t index, int64_t, bool, void* input, int64_t* target) const {
  auto it = std::upper_bound(first_window_.begin(), first_window_.end(), index);
  const size_t seg = static_cast<size_t>(it - first_window_.begin()) - 1;
  const TokenSegment& s = segments_[seg];
  const int64_t start = s.begin + (index - first_window_[seg]) * block_;  // token offset in the file
  // the window's bytes through a guarded copy: a file truncated under the run is a DataChanged
  thread_local std::vector<uint8_t> window;
  const int64_t bytes = (block_ + 1) * s.bytes_per_token;
  window.resize(static_cast<size_t>(bytes));
  s.file->copy(window.data(), s.header_bytes + start * s.bytes_per_token, bytes);
  const uint8_t* base = window.data();
  auto* in = static_cast<int64_t*>(input);
  for (int64_t k = 0; k <= block_; ++k) {
    int64_t tok = s.bytes_per_token == 1 ? base[k] : (int64_t(base[2 * k]) | (int64_t(base[2 * k + 1]) << 8));
    if (tok >= vocab_) {
      if (std::string change = s.file->change(); !change.empty()) throw DataChanged(s.file->path(), change);
      throw DataError(fmt::format("{}: token {} at position {} (sample {}) is outside the vocabulary [0, {}) "
                                  "(model.vocab_size)",
                                  s.file->path(), tok, start + k, index, vocab_));
    }
    if (k < block_) in[k] = tok;
    if (k > 0) target[k - 1] = tok;
  }
  return true;
}

void TokenDataset::check_unchanged() const {
  const MappedFile* last = nullptr;
  for (const auto& s : segments_) {
    if (s.file.get() == last) continue;  // a file's segments are adjacent
    last = s.file.get();
    if (std::string change = s.file->change(); !change.empty()) throw DataChanged(s.file->path(), change);
  }
}

torch::Tensor TokenDataset::finish(const torch::Tensor& raw, bool pin) const {
  return maybe_pinned(raw, pin);  // (B, T)
}

}  // namespace trainer::data
