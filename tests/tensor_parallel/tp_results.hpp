// A rank's named results on disk (a torch archive: each tensor and its ShardSpec as an int64 row),
// and their assembly into global tensors for the comparison with the reference.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tp_cases.hpp"

namespace trainer::test::tp {

inline torch::Tensor encode_spec(const tpl::ShardSpec& s) {
  std::vector<int64_t> v{s.dim, s.partial_grad ? 1 : 0, static_cast<int64_t>(s.global_shape.size())};
  v.insert(v.end(), s.global_shape.begin(), s.global_shape.end());
  v.push_back(static_cast<int64_t>(s.ranges.size()));
  for (const auto& [b, e] : s.ranges) v.insert(v.end(), {b, e});
  return torch::tensor(v, torch::kInt64);
}

inline tpl::ShardSpec decode_spec(const torch::Tensor& t) {
  auto c = t.contiguous();
  const int64_t* v = c.data_ptr<int64_t>();
  tpl::ShardSpec s;
  s.dim = v[0];
  s.partial_grad = v[1] != 0;
  const int64_t nd = v[2];
  s.global_shape.assign(v + 3, v + 3 + nd);
  const int64_t nr = v[3 + nd];
  for (int64_t i = 0; i < nr; ++i) s.ranges.push_back({v[4 + nd + 2 * i], v[5 + nd + 2 * i]});
  return s;
}

// names are kept in a "names" list: InputArchive cannot enumerate its keys
inline void save_results(const Results& rs, const std::map<std::string, torch::Tensor>& extra,
                         const std::filesystem::path& file) {
  torch::serialize::OutputArchive a;
  std::string names;
  for (const auto& [n, r] : rs) {
    a.write("v/" + n, r.value);
    a.write("s/" + n, encode_spec(r.spec));
    names += n + "\n";
  }
  for (const auto& [n, t] : extra) a.write("x/" + n, t);
  auto bytes = torch::from_blob(names.data(), {static_cast<int64_t>(names.size())}, torch::kUInt8).clone();
  a.write("names", bytes);
  const auto tmp = file.string() + ".tmp";
  a.save_to(tmp);
  std::filesystem::rename(tmp, file);  // complete or absent
}

struct RankFile {
  Results results;
  torch::serialize::InputArchive archive;
  torch::Tensor extra(const std::string& n) {
    torch::Tensor t;
    archive.read("x/" + n, t);
    return t;
  }
};

inline RankFile load_results(const std::filesystem::path& file) {
  RankFile f;
  f.archive.load_from(file.string());
  torch::Tensor names;
  f.archive.read("names", names);
  std::string text(reinterpret_cast<const char*>(names.data_ptr()), static_cast<size_t>(names.numel()));
  size_t at = 0;
  while (at < text.size()) {
    const auto nl = text.find('\n', at);
    const auto n = text.substr(at, nl - at);
    at = nl + 1;
    torch::Tensor v, s;
    f.archive.read("v/" + n, v);
    f.archive.read("s/" + n, s);
    f.results[n] = {v, decode_spec(s)};
  }
  return f;
}

// max |a - b| / max |b|: the error relative to the reference's scale
inline double rel_err(const torch::Tensor& a, const torch::Tensor& ref) {
  const double scale = ref.abs().max().item<double>();
  return (a - ref).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

// The global tensor the ranks' shards of `name` make (ranks: one tensor-parallel group, in tp
// order). `covered` counts how often each index along the sharded dim was written: 1 everywhere
// for a partition.
struct Assembled {
  torch::Tensor value, covered;
};
inline Assembled assemble(const std::vector<const Result*>& shards) {
  const auto& s0 = shards.at(0)->spec;
  Assembled a;
  a.value = torch::zeros(s0.global_shape, shards[0]->value.options());
  a.covered = torch::zeros({s0.global_shape.at(s0.dim)}, torch::kInt64);
  for (const auto* r : shards) {
    int64_t off = 0;
    for (const auto& [b, e] : r->spec.ranges) {
      a.value.narrow(s0.dim, b, e - b).copy_(r->value.narrow(s0.dim, off, e - b));
      a.covered.narrow(0, b, e - b) += 1;
      off += e - b;
    }
  }
  return a;
}

}  // namespace trainer::test::tp
