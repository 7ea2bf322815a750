// Shard ranges, the qkv head split and the vocabulary padding rule (sharding.hpp).
#include "tensor_parallel/sharding.hpp"

#include <stdexcept>
#include <string>

namespace trainer::tensor_parallel {

Range chunk_range(int64_t n, int64_t rank, int64_t size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (n % size != 0)
    throw std::invalid_argument("tensor parallel: " + std::to_string(n) + " does not divide by " +
                                std::to_string(size) + " ranks");
  return {rank * (n / size), (rank + 1) * (n / size)};
}

std::vector<Range> qkv_head_ranges(int64_t n_embd, int64_t n_head, int64_t rank, int64_t size) {
  if (n_head % size != 0)
    throw std::invalid_argument("tensor parallel: n_head " + std::to_string(n_head) + " does not divide by " +
                                std::to_string(size) + " ranks");
  if (n_embd % n_head != 0)
    throw std::invalid_argument("tensor parallel: n_embd " + std::to_string(n_embd) + " does not divide by n_head " +
                                std::to_string(n_head));
  // heads are contiguous groups of n_embd / n_head rows in each block, so whole heads are a chunk
  const auto heads = chunk_range(n_head, rank, size);
  const int64_t hs = n_embd / n_head;
  std::vector<Range> out;
  for (int64_t block = 0; block < 3; ++block)
    out.push_back({block * n_embd + heads.first * hs, block * n_embd + heads.second * hs});
  return out;
}

bool released_form(const torch::Tensor& t) {
  if (!t.defined() || t.numel() <= 1) return false;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) != 0) return false;
  return true;
}

torch::Tensor take_ranges(const torch::Tensor& full, int64_t dim, const std::vector<Range>& ranges) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  int64_t taken = 0;
  for (const auto& [b, e] : ranges) {
    if (b < 0 || e < b || e > full.size(dim))
      throw std::invalid_argument("tensor parallel: range [" + std::to_string(b) + ", " + std::to_string(e) +
                                  ") outside dim " + std::to_string(dim) + " of size " + std::to_string(full.size(dim)));
    parts.push_back(full.narrow(dim, b, e - b));
    taken += e - b;
  }
  if (released_form(full)) {
    auto shape = full.sizes().vec();
    shape[static_cast<size_t>(dim < 0 ? dim + full.dim() : dim)] = taken;
    return torch::zeros({1}, full.options()).expand(shape);
  }
  return torch::cat(parts, dim).contiguous().clone();
}

ShardSpec spec_of(const torch::Tensor& full, int64_t dim, std::vector<Range> ranges, bool partial_grad) {
  ShardSpec s;
  s.dim = dim;
  s.global_shape = full.sizes().vec();
  s.ranges = std::move(ranges);
  s.partial_grad = partial_grad;
  return s;
}

int64_t padded_vocab(int64_t vocab, int64_t size) {
  if (vocab < 1 || size < 1)
    throw std::invalid_argument("tensor parallel: vocabulary " + std::to_string(vocab) + " over " + std::to_string(size) + " ranks");
  return (vocab + size - 1) / size * size;
}

VocabShard vocab_shard(int64_t vocab, int64_t rank, int64_t size) {
  VocabShard s;
  s.vocab = vocab;
  s.padded = padded_vocab(vocab, size);
  const auto r = chunk_range(s.padded, rank, size);
  s.start = r.first;
  s.end = r.second;
  return s;
}

void sum_partial_grads(const std::vector<torch::Tensor>& params, Communicator& comm) {
  if (comm.size() == 1) return;
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    auto g = p.grad();
    if (g.defined()) comm.all_reduce(g, ReduceOp::Sum);
  }
}

}  // namespace trainer::tensor_parallel
