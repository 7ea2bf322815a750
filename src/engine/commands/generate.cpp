#include "engine/commands/generate.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>

#include "config/load.hpp"

namespace trainer::engine {
namespace {
constexpr const char* kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

int64_t sample_token(const torch::Tensor& logits, const SamplingOptions& opts, at::Generator& gen) {
  if (opts.temperature <= 0) return logits.argmax().item<int64_t>();
  auto l = logits / opts.temperature;
  const int64_t v = l.size(0);
  if (opts.top_k > 0 && opts.top_k < v) {
    const auto kth = std::get<0>(l.topk(opts.top_k)).index({opts.top_k - 1});
    l = l.masked_fill(l < kth, -std::numeric_limits<float>::infinity());
  }
  const auto probs = torch::softmax(l, 0);
  return torch::multinomial(probs, 1, /*replacement=*/false, gen).item<int64_t>();
}

std::vector<int64_t> generate_tokens(models::Model& model, std::vector<int64_t> tokens, int64_t block_size,
                                     const SamplingOptions& opts, const torch::Device& device, Precision precision,
                                     const std::function<bool(int64_t)>& on_token) {
  if (tokens.empty()) throw std::invalid_argument("generate_tokens: the prompt has no tokens");
  torch::NoGradGuard no_grad;
  model.eval();
  // a generator of its own, on the CPU: the draws do not depend on the device or on anything else
  // that used torch's default generator
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(opts.seed);
  for (int64_t i = 0; i < opts.max_new_tokens; ++i) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t start = n > block_size ? n - block_size : 0;
    auto ctx = torch::tensor(std::vector<int64_t>(tokens.begin() + start, tokens.end()), torch::kInt64)
                   .view({1, n - start})
                   .to(device);
    torch::Tensor logits;
    {
      AutocastScope autocast(precision, device);
      logits = model.forward(ctx);  // (1, T, V)
    }
    tokens.push_back(sample_token(logits[0][n - start - 1].to(torch::kCPU, torch::kFloat), opts, gen));
    if (on_token && !on_token(tokens.back())) break;
  }
  return tokens;
}

void Utf8Stream::put(int64_t token) {
  pending_.push_back(token);
  // a lead byte among the last three whose character is not complete yet: hold it and what follows
  size_t keep = 0;
  for (size_t back = 1; back <= std::min<size_t>(3, pending_.size()); ++back) {
    const int64_t b = pending_[pending_.size() - back];
    if (b < 0x80 || b >= 256) break;   // ASCII or not a byte: nothing to wait for
    if (b < 0xC0) continue;            // a continuation byte: look further back
    const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    if (need > back) keep = back;
    break;
  }
  const std::vector<int64_t> ready(pending_.begin(), pending_.end() - static_cast<std::ptrdiff_t>(keep));
  if (ready.empty()) return;
  out_ << bytes_to_text(ready) << std::flush;
  pending_.erase(pending_.begin(), pending_.end() - static_cast<std::ptrdiff_t>(keep));
}

void Utf8Stream::finish() {
  if (!pending_.empty()) out_ << bytes_to_text(pending_);
  pending_.clear();
  out_ << std::flush;
}

namespace {

void gen_append_utf8(std::string& out, const std::string& raw) {
  size_t i = 0;
  while (i < raw.size()) {
    const std::string rest = raw.substr(i);
    const auto bad = config::first_invalid_utf8(rest);
    if (!bad) {
      out += rest;
      return;
    }
    out.append(rest, 0, *bad);
    out += kReplacementCharacter;
    i += *bad + 1;
  }
}

}  // namespace

std::string bytes_to_text(const std::vector<int64_t>& bytes) {
  std::string out, raw;
  for (int64_t b : bytes) {
    if (b >= 0 && b < 256) {
      raw.push_back(static_cast<char>(static_cast<unsigned char>(b)));
      continue;
    }
    gen_append_utf8(out, raw);  // an id that is no byte (a vocabulary padded beyond 256)
    raw.clear();
    out += kReplacementCharacter;
  }
  gen_append_utf8(out, raw);
  return out;
}

}  // namespace trainer::engine
