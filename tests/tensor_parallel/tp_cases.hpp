// The tensor-parallel cases, written twice: with the tensor_parallel layers over a Communicator (run
// by each rank), and with plain torch on the full tensors (the reference, run by the test process).
// Both return named tensors: a rank's come with the ShardSpec saying where they sit in the global
// tensor, so the test assembles the ranks' shards and compares them with the reference. fp64.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tensor_parallel/cross_entropy.hpp"
#include "tensor_parallel/layers.hpp"
#include "tensor_parallel/mappings.hpp"
#include "tensor_parallel/sharding.hpp"

namespace trainer::test::tp {

namespace tpl = trainer::tensor_parallel;
namespace F = torch::nn::functional;

constexpr int64_t kB = 2, kS = 8, kC = 16, kHeads = 4, kVocab = 50257, kEmb = 8;

struct Result {
  torch::Tensor value;
  tpl::ShardSpec spec;  // replicated for the reference
};
using Results = std::map<std::string, Result>;

inline torch::Tensor randn(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::randn(shape, gen, torch::kFloat64);
}

// The full model's tensors, the same in every process.
struct Inputs {
  torch::Tensor x = randn({kB, kS, kC}, 1), g = randn({kB, kS, kC}, 2);
  torch::Tensor ln_w = randn({kC}, 3), ln_b = randn({kC}, 4);
  torch::Tensor fc_w = randn({4 * kC, kC}, 5), fc_b = randn({4 * kC}, 6);
  torch::Tensor pr_w = randn({kC, 4 * kC}, 7), pr_b = randn({kC}, 8);
  torch::Tensor qkv_w = randn({3 * kC, kC}, 9), qkv_b = randn({3 * kC}, 10);
  torch::Tensor ap_w = randn({kC, kC}, 11), ap_b = randn({kC}, 12);
  torch::Tensor gy = randn({kB, kS, 4 * kC}, 13), x4 = randn({kB, kS, 4 * kC}, 14);
  torch::Tensor emb = randn({kVocab, kEmb}, 15);
  torch::Tensor ids, target;
  Inputs() {
    auto gen = at::detail::createCPUGenerator(16);
    ids = torch::randint(kVocab, {kB, kS}, gen, torch::kInt64);
    target = torch::randint(kVocab, {kB, kS}, gen, torch::kInt64);
    target[0][3] = -100;   // ignored
    target[1][0] = kVocab - 1;  // the last real token: on the last rank, next to the padding
  }
};
// Per-rank inputs of the mapping cases (partial sums): rank r's.
inline torch::Tensor partial(int64_t r, int64_t salt) { return randn({kB, kS, kC}, 100 + 10 * salt + r); }

inline torch::Tensor leaf(const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); }
inline tpl::ShardSpec whole(const torch::Tensor& t, bool partial_grad = false) {
  return tpl::spec_of(t, -1, {}, partial_grad);
}

// --- the sharded side ---------------------------------------------------------------------------

class Recorder {
 public:
  explicit Recorder(tpl::Communicator& comm) : comm_(comm) {}
  void whole(const std::string& n, const torch::Tensor& t) { out[n] = {t.detach().clone(), tp::whole(t)}; }
  // rank's contiguous chunk of a global tensor of `global_shape` along `dim`
  void chunk(const std::string& n, const torch::Tensor& t, int64_t dim) {
    auto shape = t.sizes().vec();
    shape[dim] *= comm_.size();
    tpl::ShardSpec s;
    s.dim = dim;
    s.global_shape = shape;
    s.ranges = {tpl::chunk_range(shape[dim], comm_.rank(), comm_.size())};
    out[n] = {t.detach().clone(), s};
  }
  // a parameter's gradient, placed by the layer's own spec (partial gradients summed first)
  void grad(const std::string& n, const torch::Tensor& p, tpl::ShardSpec s) {
    auto g = p.grad().clone();
    if (s.partial_grad) {
      comm_.all_reduce(g, tpl::ReduceOp::Sum);
      s.partial_grad = false;
    }
    out[n] = {g, s};
  }
  void layer_grads(const std::string& prefix, torch::nn::Module& m, const tpl::NamedSpecs& specs) {
    auto params = m.named_parameters();
    for (const auto& [name, spec] : specs) grad(prefix + "." + name, params[name], spec);
  }
  Results out;

 private:
  tpl::Communicator& comm_;
};

inline void run_mappings(const Inputs& in, tpl::Communicator& comm, Recorder& rec) {
  const int64_t r = comm.rank();
  auto chunk2 = [&](const torch::Tensor& t) { return tpl::local_chunk(t, comm, 2); };
  auto chunk1 = [&](const torch::Tensor& t) { return tpl::local_chunk(t, comm, 1); };
  {  // identity forward, all-reduce backward
    auto x = leaf(in.x);
    auto y = tpl::copy_to_region(x, comm);
    (y * partial(r, 1)).sum().backward();
    rec.whole("copy_to.y", y);
    rec.whole("copy_to.dx", x.grad());
  }
  {
    auto x = leaf(partial(r, 2));
    auto y = tpl::reduce_from_region(x, comm);
    (y * in.g).sum().backward();
    rec.whole("reduce_from.y", y);
    rec.whole("reduce_from.dx", x.grad());
  }
  {
    auto x = leaf(in.x);
    auto y = tpl::scatter_to_region(x, comm);
    (y * chunk2(in.g)).sum().backward();
    rec.chunk("scatter.y", y, 2);
    rec.whole("scatter.dx", x.grad());
  }
  {
    auto x = leaf(chunk2(in.x));
    auto y = tpl::gather_from_region(x, comm);
    (y * in.g).sum().backward();
    rec.whole("gather.y", y);
    rec.chunk("gather.dx", x.grad(), 2);
  }
  {
    auto x = leaf(in.x);
    auto y = tpl::scatter_to_sequence(x, comm, 1);
    (y * chunk1(in.g)).sum().backward();
    rec.chunk("scatter_seq.y", y, 1);
    rec.whole("scatter_seq.dx", x.grad());
  }
  {
    auto x = leaf(chunk1(in.x));
    auto y = tpl::gather_from_sequence(x, comm, 1);
    (y * partial(r, 3)).sum().backward();
    rec.whole("gather_seq.y", y);
    rec.chunk("gather_seq.dx", x.grad(), 1);
  }
  {
    auto x = leaf(partial(r, 4));
    auto y = tpl::reduce_scatter_to_sequence(x, comm, 1);
    (y * chunk1(in.g)).sum().backward();
    rec.chunk("reduce_scatter_seq.y", y, 1);
    rec.whole("reduce_scatter_seq.dx", x.grad());
  }
}

inline void run_linears(const Inputs& in, tpl::Communicator& comm, Recorder& rec) {
  for (bool gather : {false, true}) {
    const std::string n = gather ? "column_gathered" : "column";
    auto x = leaf(in.x);
    auto col = tpl::column_parallel(in.fc_w, in.fc_b, comm, {}, gather);
    auto y = col->forward(x);
    (y * (gather ? in.gy : tpl::local_chunk(in.gy, comm, 2))).sum().backward();
    gather ? rec.whole(n + ".y", y) : rec.chunk(n + ".y", y, 2);
    rec.whole(n + ".dx", x.grad());
    rec.layer_grads(n, *col, col->shard_specs());
  }
  for (bool parallel_in : {true, false}) {
    const std::string n = parallel_in ? "row" : "row_scattered";
    auto x = leaf(parallel_in ? tpl::local_chunk(in.x4, comm, 2) : in.x4);
    auto row = tpl::RowParallelLinear(in.pr_w, in.pr_b, comm, tpl::ParallelOptions{}, parallel_in);
    auto y = row->forward(x);
    (y * in.g).sum().backward();
    rec.whole(n + ".y", y);
    parallel_in ? rec.chunk(n + ".dx", x.grad(), 2) : rec.whole(n + ".dx", x.grad());
    rec.layer_grads(n, *row, row->shard_specs());
  }
}

// LayerNorm -> c_fc (column) -> gelu -> c_proj (row) -> + x; with sequence parallel the LayerNorm
// and the residual see this rank's part of the sequence.
inline void run_mlp(const Inputs& in, tpl::Communicator& comm, Recorder& rec, bool sp) {
  const std::string n = sp ? "mlp_sp" : "mlp";
  const tpl::ParallelOptions o{sp, 1};
  auto x = leaf(sp ? tpl::local_chunk(in.x, comm, 1) : in.x);
  auto ln_w = leaf(in.ln_w), ln_b = leaf(in.ln_b);
  auto fc = tpl::column_parallel(in.fc_w, in.fc_b, comm, o);
  auto pr = tpl::RowParallelLinear(in.pr_w, in.pr_b, comm, o);
  auto h = torch::layer_norm(x, {kC}, ln_w, ln_b);
  auto y = x + pr->forward(torch::gelu(fc->forward(h)));
  (y * (sp ? tpl::local_chunk(in.g, comm, 1) : in.g)).sum().backward();
  sp ? rec.chunk(n + ".y", y, 1) : rec.whole(n + ".y", y);
  sp ? rec.chunk(n + ".dx", x.grad(), 1) : rec.whole(n + ".dx", x.grad());
  rec.grad(n + ".ln.weight", ln_w, whole(in.ln_w, sp && comm.size() > 1));
  rec.grad(n + ".ln.bias", ln_b, whole(in.ln_b, sp && comm.size() > 1));
  rec.layer_grads(n + ".c_fc", *fc, fc->shard_specs());
  rec.layer_grads(n + ".c_proj", *pr, pr->shard_specs());
}

// Causal attention over (B, S, 3 * h * hs) = q | k | v of h heads -> (B, S, h * hs).
inline torch::Tensor causal_attention(const torch::Tensor& qkv, int64_t heads) {
  auto parts = qkv.chunk(3, -1);
  const int64_t b = qkv.size(0), s = qkv.size(1), hs = parts[0].size(-1) / heads;
  auto split = [&](const torch::Tensor& t) { return t.reshape({b, s, heads, hs}).transpose(1, 2); };
  auto q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);
  auto att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hs));
  auto mask = torch::ones({s, s}, torch::kBool).triu(1);
  att = torch::softmax(att.masked_fill(mask, -INFINITY), -1);
  return torch::matmul(att, v).transpose(1, 2).reshape({b, s, heads * hs});
}

inline void run_attention(const Inputs& in, tpl::Communicator& comm, Recorder& rec, bool sp) {
  const std::string n = sp ? "attn_sp" : "attn";
  const tpl::ParallelOptions o{sp, 1};
  auto x = leaf(sp ? tpl::local_chunk(in.x, comm, 1) : in.x);
  auto ln_w = leaf(in.ln_w), ln_b = leaf(in.ln_b);
  auto qkv = tpl::qkv_column_parallel(in.qkv_w, in.qkv_b, kHeads, comm, o);
  auto pr = tpl::RowParallelLinear(in.ap_w, in.ap_b, comm, o);
  auto h = torch::layer_norm(x, {kC}, ln_w, ln_b);
  auto y = x + pr->forward(causal_attention(qkv->forward(h), kHeads / comm.size()));
  (y * (sp ? tpl::local_chunk(in.g, comm, 1) : in.g)).sum().backward();
  sp ? rec.chunk(n + ".y", y, 1) : rec.whole(n + ".y", y);
  sp ? rec.chunk(n + ".dx", x.grad(), 1) : rec.whole(n + ".dx", x.grad());
  rec.grad(n + ".ln.weight", ln_w, whole(in.ln_w, sp && comm.size() > 1));
  rec.grad(n + ".ln.bias", ln_b, whole(in.ln_b, sp && comm.size() > 1));
  rec.layer_grads(n + ".c_attn", *qkv, qkv->shard_specs());
  rec.layer_grads(n + ".c_proj", *pr, pr->shard_specs());
}

// Full logits with garbage in the padding columns, which the loss must ignore.
inline torch::Tensor padded_logits(int64_t padded) {
  auto full = randn({kB * kS, kVocab}, 17) * 3.0;
  return torch::cat({full, torch::full({kB * kS, padded - kVocab}, 40.0, torch::kFloat64)}, 1);
}

inline void run_cross_entropy(const Inputs& in, tpl::Communicator& comm, Recorder& rec) {
  const auto shard = tpl::vocab_shard(kVocab, comm.rank(), comm.size());
  const auto target = in.target.reshape({-1});
  for (double eps : {0.0, 0.1}) {
    const std::string n = eps > 0 ? "ce_smooth" : "ce";
    auto z = leaf(padded_logits(shard.padded).narrow(1, shard.start, shard.local()));
    auto losses = tpl::vocab_parallel_cross_entropy(z, target, shard, comm, eps);
    auto loss = tpl::mean_over_targets(losses, target);
    loss.backward();
    rec.whole(n + ".loss", loss);
    rec.whole(n + ".losses", losses);
    tpl::ShardSpec s;
    s.dim = 1;
    s.global_shape = {kB * kS, shard.padded};
    s.ranges = {{shard.start, shard.end}};
    rec.grad(n + ".dlogits", z, s);
  }
}

// wte -> tanh -> tied lm_head -> cross entropy (label smoothing 0.1) at GPT-2's vocabulary.
inline void run_tied(const Inputs& in, tpl::Communicator& comm, Recorder& rec, bool sp) {
  const std::string n = sp ? "tied_sp" : "tied";
  const tpl::ParallelOptions o{sp, 1};
  auto wte = tpl::VocabParallelEmbedding(in.emb, comm, o);
  auto h = wte->forward(in.ids);
  auto logits = tpl::parallel_lm_logits(torch::tanh(h), wte->weight, comm, o);
  auto losses = tpl::vocab_parallel_cross_entropy(logits, in.target, wte->shard(), comm, 0.1);
  auto loss = tpl::mean_over_targets(losses, in.target);
  loss.backward();
  sp ? rec.chunk(n + ".h", h, 1) : rec.whole(n + ".h", h);
  rec.whole(n + ".loss", loss);
  rec.whole(n + ".full_logits", tpl::gather_vocab_logits(logits, wte->shard(), comm));
  rec.layer_grads(n + ".wte", *wte, wte->shard_specs());
}

inline Results run_all(tpl::Communicator& comm) {
  Inputs in;
  Recorder rec(comm);
  run_mappings(in, comm, rec);
  run_linears(in, comm, rec);
  for (bool sp : {false, true}) {
    run_mlp(in, comm, rec, sp);
    run_attention(in, comm, rec, sp);
    run_tied(in, comm, rec, sp);
  }
  run_cross_entropy(in, comm, rec);
  return rec.out;
}

// --- the reference: plain torch, full tensors ------------------------------------------------------

inline Results reference(int64_t world_tp) {
  Inputs in;
  Results out;
  auto put = [&](const std::string& n, const torch::Tensor& t) { out[n] = {t.detach().clone(), whole(t)}; };
  auto sum_partials = [&](int64_t salt) {
    auto s = torch::zeros({kB, kS, kC}, torch::kFloat64);
    for (int64_t r = 0; r < world_tp; ++r) s += partial(r, salt);
    return s;
  };
  put("copy_to.y", in.x);
  put("copy_to.dx", sum_partials(1));
  put("reduce_from.y", sum_partials(2));
  put("reduce_from.dx", in.g);
  for (const std::string n : {"scatter", "scatter_seq"}) {
    put(n + ".y", in.x);
    put(n + ".dx", in.g);
  }
  put("gather.y", in.x);
  put("gather.dx", in.g);
  put("gather_seq.y", in.x);
  put("gather_seq.dx", sum_partials(3));
  put("reduce_scatter_seq.y", sum_partials(4));
  put("reduce_scatter_seq.dx", in.g);

  for (const std::string n : {"column", "column_gathered"}) {
    auto x = leaf(in.x), w = leaf(in.fc_w), b = leaf(in.fc_b);
    auto y = F::linear(x, w, b);
    (y * in.gy).sum().backward();
    put(n + ".y", y), put(n + ".dx", x.grad()), put(n + ".weight", w.grad()), put(n + ".bias", b.grad());
  }
  for (const std::string n : {"row", "row_scattered"}) {
    auto x = leaf(in.x4), w = leaf(in.pr_w), b = leaf(in.pr_b);
    auto y = F::linear(x, w, b);
    (y * in.g).sum().backward();
    put(n + ".y", y), put(n + ".dx", x.grad()), put(n + ".weight", w.grad()), put(n + ".bias", b.grad());
  }
  for (const std::string n : {"mlp", "mlp_sp", "attn", "attn_sp"}) {
    const bool attn = n.rfind("attn", 0) == 0;
    auto x = leaf(in.x), ln_w = leaf(in.ln_w), ln_b = leaf(in.ln_b);
    auto w1 = leaf(attn ? in.qkv_w : in.fc_w), b1 = leaf(attn ? in.qkv_b : in.fc_b);
    auto w2 = leaf(attn ? in.ap_w : in.pr_w), b2 = leaf(attn ? in.ap_b : in.pr_b);
    auto h = F::linear(torch::layer_norm(x, {kC}, ln_w, ln_b), w1, b1);
    auto y = x + F::linear(attn ? causal_attention(h, kHeads) : torch::gelu(h), w2, b2);
    (y * in.g).sum().backward();
    const std::string first = attn ? ".c_attn" : ".c_fc";
    put(n + ".y", y), put(n + ".dx", x.grad());
    put(n + ".ln.weight", ln_w.grad()), put(n + ".ln.bias", ln_b.grad());
    put(n + first + ".weight", w1.grad()), put(n + first + ".bias", b1.grad());
    put(n + ".c_proj.weight", w2.grad()), put(n + ".c_proj.bias", b2.grad());
  }
  for (const std::string n : {"tied", "tied_sp"}) {
    auto e = leaf(in.emb);
    auto h = torch::embedding(e, in.ids);
    auto logits = torch::matmul(torch::tanh(h), e.t());
    auto loss = F::cross_entropy(logits.reshape({-1, kVocab}), in.target.reshape({-1}),
                                 F::CrossEntropyFuncOptions().label_smoothing(0.1));
    loss.backward();
    put(n + ".h", h), put(n + ".loss", loss), put(n + ".full_logits", logits), put(n + ".wte.weight", e.grad());
  }
  for (double eps : {0.0, 0.1}) {
    const std::string n = eps > 0 ? "ce_smooth" : "ce";
    auto z = leaf(padded_logits(kVocab));
    const auto target = in.target.reshape({-1});
    auto losses = F::cross_entropy(z, target, F::CrossEntropyFuncOptions().label_smoothing(eps).reduction(torch::kNone));
    auto loss = F::cross_entropy(z, target, F::CrossEntropyFuncOptions().label_smoothing(eps));
    loss.backward();
    put(n + ".loss", loss), put(n + ".losses", losses), put(n + ".dlogits", z.grad());
  }
  return out;
}

}  // namespace trainer::test::tp
