// Global <-> local tensors of a tensor-parallel model (tp_state.hpp).
#include "engine/optim/tp_state.hpp"

#include <map>
#include <optional>
#include <stdexcept>

#include "io/safetensors.hpp"
#include "tensor_parallel/sharding.hpp"

namespace trainer::engine {
namespace {

namespace tpl = tensor_parallel;

// Global name -> spec of every sharded parameter, tied aliases ("lm_head.weight") included.
std::map<std::string, tpl::ShardSpec> sharded_specs(const models::Model& m) {
  std::map<std::string, tpl::ShardSpec> out;
  for (const auto& [name, spec] : m.shard_specs())
    if (!spec.replicated()) out[name] = spec;
  if (const auto* tied = dynamic_cast<const io::TiedState*>(&m))
    for (const auto& [alias, registered] : tied->tied_names())
      if (auto it = out.find(registered); it != out.end()) out[alias] = it->second;
  return out;
}

// The spec a tensor named `name` of `dims` dimensions follows: its parameter's own, or that of the
// parameter "<p>" for an optimizer field "<p>.<field>" of the parameter's rank (not "<p>.step").
std::optional<tpl::ShardSpec> spec_for(const std::map<std::string, tpl::ShardSpec>& specs, const std::string& name,
                                       int64_t dims) {
  auto match = [&](const std::string& p) -> std::optional<tpl::ShardSpec> {
    auto it = specs.find(p);
    if (it == specs.end() || static_cast<int64_t>(it->second.global_shape.size()) != dims) return std::nullopt;
    return it->second;
  };
  if (auto s = match(name)) return s;
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? std::nullopt : match(name.substr(0, dot));
}

std::string shape_text(const std::vector<int64_t>& s) { return c10::str(c10::IntArrayRef(s)); }

// Every rank's `local` (same shape on each) placed at the ranks' ranges of the global tensor.
torch::Tensor assemble(const torch::Tensor& local, const tpl::ShardSpec& spec, tpl::Communicator& comm) {
  const int64_t n = static_cast<int64_t>(spec.ranges.size()), t = comm.size();
  std::vector<int64_t> mine;
  for (const auto& [b, e] : spec.ranges) mine.insert(mine.end(), {b, e});
  auto all_ranges = comm.all_gather(torch::tensor(mine, torch::kInt64).to(local.device()), 0).cpu();  // (t * 2n)
  auto all = comm.all_gather(local.contiguous(), spec.dim);  // the ranks' locals, in rank order
  auto full = torch::zeros(spec.global_shape, local.options());
  const int64_t per = local.size(spec.dim);
  for (int64_t r = 0; r < t; ++r) {
    int64_t off = r * per;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = all_ranges[r * 2 * n + 2 * i].item<int64_t>(), e = all_ranges[r * 2 * n + 2 * i + 1].item<int64_t>();
      full.narrow(spec.dim, b, e - b).copy_(all.narrow(spec.dim, off, e - b));
      off += e - b;
    }
  }
  return spec.real >= 0 ? full.narrow(spec.dim, 0, spec.real).contiguous() : full;
}

torch::Tensor slice(const std::string& name, torch::Tensor full, const tpl::ShardSpec& spec) {
  auto want = spec.global_shape;
  if (spec.real >= 0 && full.dim() == static_cast<int64_t>(want.size()) && full.size(spec.dim) == spec.real &&
      spec.real < want[spec.dim]) {  // the vocabulary's padding rows: zero, as the model's own
    auto pad_shape = full.sizes().vec();
    pad_shape[spec.dim] = want[spec.dim] - spec.real;
    full = torch::cat({full, torch::zeros(pad_shape, full.options())}, spec.dim);
  }
  if (full.sizes().vec() != want) {
    auto shown = want;
    if (spec.real >= 0) shown[spec.dim] = spec.real;
    throw std::runtime_error(name + ": the file holds shape " + shape_text(full.sizes().vec()) +
                             ", the model's (global) tensor is " + shape_text(shown));
  }
  return tpl::take_ranges(full, spec.dim, spec.ranges);
}

}  // namespace

bool tp_sharded(const models::Model& m) { return !sharded_specs(m).empty(); }

io::NamedTensors gather_global(const models::Model& m, const io::NamedTensors& local) {
  const auto specs = sharded_specs(m);
  if (specs.empty()) return local;
  torch::NoGradGuard no_grad;
  io::NamedTensors out;
  for (const auto& [name, t] : local) {
    const auto spec = spec_for(specs, name, t.dim());
    out.emplace_back(name, spec ? assemble(t.detach(), *spec, m.tp_comm()) : t);
  }
  return out;
}

LocalPart local_part(const models::Model& m, const io::NamedTensors& local, bool with_whole) {
  const auto specs = sharded_specs(m);
  torch::NoGradGuard no_grad;
  LocalPart out;
  for (const auto& [name, t] : local) {
    const auto spec = spec_for(specs, name, t.dim());
    if (!spec) {
      if (with_whole) out.tensors.emplace_back(name, t.detach());
      continue;
    }
    // the padding rows are the tail of the last ranks' slices: clip the ranges to the real extent
    io::PartRanges r;
    r.dim = spec->dim;
    r.shape = spec->global_shape;
    const int64_t real = spec->real >= 0 ? spec->real : r.shape[r.dim];
    r.shape[r.dim] = real;
    int64_t kept = 0;
    for (const auto& [b, e] : spec->ranges)
      if (b < real) {
        r.ranges.emplace_back(b, std::min(e, real));
        kept += std::min(e, real) - b;
      }
    if (kept == 0) continue;  // all padding: nothing of the global tensor
    out.tensors.emplace_back(name, t.detach().narrow(spec->dim, 0, kept).contiguous());
    out.ranges[name] = std::move(r);
  }
  return out;
}

io::NamedTensors take_local(const models::Model& m, const io::NamedTensors& global) {
  const auto specs = sharded_specs(m);
  if (specs.empty()) return global;
  torch::NoGradGuard no_grad;
  io::NamedTensors out;
  for (const auto& [name, t] : global) {
    const auto spec = spec_for(specs, name, t.dim());
    out.emplace_back(name, spec ? slice(name, t, *spec) : t);
  }
  return out;
}

}  // namespace trainer::engine
