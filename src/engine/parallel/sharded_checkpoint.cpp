#include "engine/parallel/sharded_checkpoint.hpp"

#include <map>
#include <optional>
#include <set>

#include "engine/optim/optim_state.hpp"

namespace trainer::engine {
namespace {

// The model's first name of each of the sync's parameters (tied tensors once), by index.
std::vector<std::string> shard_param_names(const dist::ShardSync& sync, const torch::nn::Module& model) {
  std::map<const void*, std::string> by_impl;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    by_impl.emplace(item.value().unsafeGetTensorImpl(), item.key());
  std::vector<std::string> out;
  for (const auto& p : sync.params()) {
    auto it = by_impl.find(p.unsafeGetTensorImpl());
    if (it == by_impl.end()) throw std::runtime_error("sharded optimizer: a parameter is not part of the model");
    out.push_back(it->second);
  }
  return out;
}

// A parameter-shaped tensor as its elements in storage order (the order the pieces index).
torch::Tensor storage_order(const torch::Tensor& t, const torch::Tensor& like) {
  auto st = torch::empty_strided(like.sizes(), like.strides(), t.options());
  st.copy_(t);
  return st.as_strided({st.numel()}, {1}, 0);
}

}  // namespace

std::string shard_group_name(int64_t rank, int64_t world) {
  return "optimizer-shard-" + std::to_string(rank) + "-of-" + std::to_string(world);
}

io::NamedTensors shard_optimizer_tensors(const dist::ShardSync& sync, const torch::optim::Optimizer& opt,
                                         const torch::nn::Module& model) {
  const auto names = shard_param_names(sync, model);
  io::NamedTensors out;
  for (const auto& pc : sync.pieces()) {
    auto it = opt.state().find(pc.value.unsafeGetTensorImpl());
    if (it == opt.state().end()) continue;  // not stepped yet
    const std::string& name = names[pc.param];
    if (const auto step = state_step(*it->second)) out.emplace_back(name + ".step", torch::tensor(*step, torch::kInt64));
    const bool known = visit_state_tensors(*it->second, [&](const char* field, const torch::Tensor& t) {
      if (t.defined()) out.emplace_back(name + "." + field, t.detach().cpu().clone());
    });
    if (!known) throw std::invalid_argument("optimizer state: only SGD and AdamW are supported");
  }
  return out;
}

nlohmann::json shard_layout(const dist::ShardSync& sync, const torch::nn::Module& model) {
  const auto names = shard_param_names(sync, model);
  const int64_t world = sync.world();
  nlohmann::json params = nlohmann::json::array();
  std::vector<nlohmann::json> entries(sync.params().size());
  for (const auto& b : sync.buckets()) {
    for (size_t j = 0; j < b.params.size(); ++j) {
      const auto& p = sync.params()[b.params[j]];
      nlohmann::json pieces = nlohmann::json::array();
      const int64_t off = b.offsets[j];
      for (int64_t r = 0; r < world; ++r) {
        const int64_t start = std::max(r * b.chunk, off), end = std::min((r + 1) * b.chunk, off + p.numel());
        if (start < end) pieces.push_back({r, start - off, end - start});
      }
      entries[b.params[j]] = {{"name", names[b.params[j]]},
                              {"shape", p.sizes().vec()},
                              {"strides", p.strides().vec()},
                              {"pieces", pieces}};
    }
  }
  for (auto& e : entries) params.push_back(std::move(e));
  nlohmann::json files = nlohmann::json::array();
  for (int64_t r = 0; r < world; ++r) files.push_back(shard_group_name(r, world) + ".safetensors");
  return {{"world_size", world}, {"files", files}, {"params", params}};
}

std::string part_shard_group_name(int64_t part, int64_t parts, int64_t rank, int64_t world) {
  return io::part_group_name("optimizer", part, parts) + "-shard-" + std::to_string(rank) + "-of-" +
         std::to_string(world);
}

namespace {
constexpr const char* kPartLayoutKey = "shard_layout";   // a part shard's metadata
constexpr const char* kPartRangesKey = "shard_ranges";
constexpr const char* kPartWholeKey = "shard_whole";
}  // namespace

PartShard part_shard(const CheckpointPart& part, const torch::optim::Optimizer& opt, const torch::nn::Module& model,
                     int64_t k, int64_t parts, const std::set<std::string>& held,
                     const std::map<std::string, io::PartRanges>& ranges, bool whole) {
  const auto [rank, world] = part.shard_of();
  PartShard s;
  s.group = part_shard_group_name(k, parts, rank, world);
  for (auto& [name, t] : part.shard_tensors(opt, model)) {
    const auto dot = name.rfind('.');
    const std::string param = name.substr(0, dot), field = name.substr(dot + 1);
    // a step count is a whole tensor: the whole part's alone (assembly takes each once)
    if (held.count(param) && (field != "step" || whole)) s.tensors.emplace_back(name, std::move(t));
  }
  nlohmann::json kept = nlohmann::json::array();
  const auto layout = part.shard_layout(model);
  for (const auto& e : layout.at("params"))
    if (held.count(e.at("name").get<std::string>())) kept.push_back(e);
  s.metadata[kPartLayoutKey] = nlohmann::json{{"params", kept}}.dump();
  s.metadata[kPartRangesKey] = io::encode_ranges(ranges);
  s.metadata[kPartWholeKey] = whole ? "1" : "0";
  s.metadata["checkpoint_group"] = s.group;
  return s;
}

namespace {

// The tensor of `field` in one parameter's state, undefined when it keeps none.
torch::Tensor state_field(const torch::optim::OptimizerParamState& st, const std::string& field) {
  torch::Tensor out;
  visit_state_tensors(st, [&](const char* f, const torch::Tensor& t) {
    if (field == f) out = t;
  });
  return out;
}

}  // namespace

io::NamedTensors gather_shard_optimizer(const dist::ShardSync& sync, dist::Group& dp, const torch::optim::Optimizer& opt,
                                        const torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  (void)optim_state_kind(opt);  // SGD or AdamW, else a clear error
  const auto names = shard_param_names(sync, model);
  std::vector<std::string> fields;
  for (const std::string f : all_optim_state_names())
    if (f != "step") fields.push_back(f);
  const size_t n = sync.params().size(), nf = fields.size();
  auto state_of = [&](const dist::OwnedPiece& pc) -> const torch::optim::OptimizerParamState* {
    auto it = opt.state().find(pc.value.unsafeGetTensorImpl());
    return it == opt.state().end() ? nullptr : it->second.get();
  };
  // What the ranks hold, agreed by a MAX over dp (a rank may own no piece of a parameter): per field,
  // whether some piece keeps it; per parameter 0 (no state anywhere), 1 (state, no step: SGD) or its
  // AdamW step + 2 (the same in every piece)
  auto held = torch::zeros({static_cast<int64_t>(nf + n)}, torch::kInt64);
  auto h = held.accessor<int64_t, 1>();
  for (const auto& pc : sync.pieces()) {
    const auto* st = state_of(pc);
    if (!st) continue;
    for (size_t f = 0; f < nf; ++f)
      if (state_field(*st, fields[f]).defined()) h[f] = 1;
    const auto step = state_step(*st);
    h[nf + pc.param] = step ? *step + 2 : 1;
  }
  held = held.to(dp.device());
  dp.all_reduce(held, dist::Reduce::Max, "optimizer state held");
  held = held.cpu().contiguous();
  const std::vector<int64_t> g(held.data_ptr<int64_t>(), held.data_ptr<int64_t>() + held.numel());
  // each field, bucket by bucket: every rank's owned chunk (zeros where it keeps nothing) gathered
  std::vector<std::map<std::string, torch::Tensor>> whole(n);
  for (size_t bi = 0; bi < sync.buckets().size(); ++bi) {
    const auto& b = sync.buckets()[bi];
    for (size_t f = 0; f < nf; ++f) {
      if (g[f] == 0) continue;
      auto chunk = torch::zeros({b.chunk}, b.flat_param.options());
      for (const auto& pc : sync.pieces()) {
        const auto* st = pc.bucket == bi ? state_of(pc) : nullptr;
        if (auto t = st ? state_field(*st, fields[f]) : torch::Tensor(); t.defined())
          chunk.narrow(0, pc.chunk_offset, pc.len).copy_(t.reshape({-1}));
      }
      const auto flat = dp.all_gather(chunk, 0, "optimizer state " + fields[f]);  // (padded)
      for (size_t j = 0; j < b.params.size(); ++j) {
        const auto& p = sync.params()[b.params[j]];
        if (g[nf + b.params[j]] == 0) continue;
        // the parameter's elements in storage order, as its bucket holds them
        auto view = flat.as_strided(p.sizes(), p.strides(), flat.storage_offset() + b.offsets[j]);
        whole[b.params[j]][fields[f]] = torch::empty(p.sizes(), flat.options().device(torch::kCPU)).copy_(view);
      }
    }
  }
  io::NamedTensors out;  // in parameter order, step first: optimizer_state_tensors' form
  for (size_t i = 0; i < n; ++i) {
    if (g[nf + i] > 1) out.emplace_back(names[i] + ".step", torch::tensor(g[nf + i] - 2, torch::kInt64));
    for (const auto& f : fields)
      if (auto it = whole[i].find(f); it != whole[i].end()) out.emplace_back(names[i] + "." + f, it->second);
  }
  return out;
}

namespace {

using ShardMaps = std::vector<std::map<std::string, torch::Tensor>>;  // per rank: its shard's tensors

// One state field of one parameter assembled from every rank's piece into its global shape;
// undefined when no shard keeps that field (SGD, no amsgrad, never stepped).
torch::Tensor assemble_field(const nlohmann::json& entry, const std::string& field, const ShardMaps& shards,
                             const std::filesystem::path& from) {
  const auto name = entry.at("name").get<std::string>();
  const auto shape = entry.at("shape").get<std::vector<int64_t>>();
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  const auto world = static_cast<int64_t>(shards.size());
  torch::Tensor flat;
  size_t found = 0;
  for (const auto& pc : entry.at("pieces")) {
    const int64_t r = pc.at(0).get<int64_t>(), begin = pc.at(1).get<int64_t>(), len = pc.at(2).get<int64_t>();
    if (r < 0 || r >= world) throw io::CheckpointError(from.string() + ": the shard layout names rank " + std::to_string(r));
    const auto& shard = shards[static_cast<size_t>(r)];
    auto t = shard.find(name + "." + field);
    if (t == shard.end()) continue;
    if (t->second.numel() != len || begin < 0 || begin + len > numel)
      throw io::CheckpointError((from / (shard_group_name(r, world) + ".safetensors")).string() + ": " + name + "." +
                                field + " has " + std::to_string(t->second.numel()) + " elements, the layout says " +
                                std::to_string(len));
    if (!flat.defined()) flat = torch::zeros({numel}, t->second.options());
    flat.narrow(0, begin, len).copy_(t->second.reshape({-1}));
    ++found;
  }
  if (found == 0) return {};
  if (found != entry.at("pieces").size()) throw io::CheckpointError(from.string() + ": some shards lack " + name + "." + field);
  return flat.as_strided(shape, entry.at("strides").get<std::vector<int64_t>>(), 0).contiguous();
}

}  // namespace

namespace {

// One part's optimizer tensors from its N shards (part_shard's files): each parameter's fields
// assembled by the layout, the padding of a sliced one cut off, as a part io::assemble_parts takes.
io::SafetensorsFile assemble_part_shards(const io::CheckpointContent& content, const std::filesystem::path& from,
                                         int64_t k, int64_t parts, int64_t world) {
  ShardMaps shards(static_cast<size_t>(world));
  const std::map<std::string, std::string>* meta = nullptr;
  for (int64_t r = 0; r < world; ++r) {
    const auto name = part_shard_group_name(k, parts, r, world);
    auto g = content.groups.find(name);
    auto m = content.metadata.find(name);
    if (g == content.groups.end() || m == content.metadata.end())
      throw io::CheckpointError((from / (name + ".safetensors")).string() + ": shard missing from this checkpoint");
    shards[static_cast<size_t>(r)] = std::map<std::string, torch::Tensor>(g->second.begin(), g->second.end());
    if (r == 0) meta = &m->second;
  }
  io::SafetensorsFile f;
  f.path = (from / (part_shard_group_name(k, parts, 0, world) + ".safetensors")).string();
  nlohmann::json layout, ranges, field_ranges = nlohmann::json::object();
  try {
    layout = nlohmann::json::parse(meta->at(kPartLayoutKey));
    ranges = nlohmann::json::parse(meta->at(kPartRangesKey));
    const bool whole = meta->at(kPartWholeKey) == "1";
    for (const auto& e : layout.at("params")) {
      const auto name = e.at("name").get<std::string>();
      const bool sliced = ranges.contains(name);
      int64_t kept = 0;  // a sliced tensor's real rows: the padding is the tail of the last ranks'
      if (sliced)
        for (const auto& be : ranges.at(name).at("ranges")) kept += be.at(1).get<int64_t>() - be.at(0).get<int64_t>();
      for (const std::string field : all_optim_state_names()) {
        if (field == "step") continue;
        auto t = assemble_field(e, field, shards, from);
        if (!t.defined()) continue;
        if (sliced) {
          t = t.narrow(ranges.at(name).at("dim").get<int64_t>(), 0, kept).contiguous();
          field_ranges[name + "." + field] = ranges.at(name);
        }
        f.tensors.emplace_back(name + "." + field, t);
      }
      if (!whole) continue;
      for (const auto& shard : shards)  // AdamW's step count, the same in every piece
        if (auto t = shard.find(name + ".step"); t != shard.end()) {
          f.tensors.emplace_back(name + ".step", t->second.clone());
          break;
        }
    }
  } catch (const nlohmann::json::exception& e) {
    throw io::CheckpointError(f.path + ": malformed shard metadata: " + e.what());
  } catch (const std::out_of_range&) {
    throw io::CheckpointError(f.path + ": shard metadata lacks its layout, ranges or whole flag");
  }
  f.metadata[io::kRangesKey] = field_ranges.dump();
  return f;
}

}  // namespace

io::NamedTensors full_optimizer_state(const io::CheckpointContent& content, const std::filesystem::path& from) {
  if (auto it = content.groups.find("optimizer"); it != content.groups.end()) return it->second;
  if (content.state.contains("optimizer_part_shards")) {
    const auto& d = content.state.at("optimizer_part_shards");
    const int64_t parts = d.value("parts", int64_t{0}), world = d.value("world_size", int64_t{0});
    if (parts < 1 || parts > (1 << 16) || world < 1 || world > (1 << 20))
      throw io::CheckpointError((from / "state.json").string() + ": bad optimizer_part_shards (parts " +
                                std::to_string(parts) + ", world_size " + std::to_string(world) + ")");
    std::vector<io::SafetensorsFile> in;
    for (int64_t k = 0; k < parts; ++k) in.push_back(assemble_part_shards(content, from, k, parts, world));
    return io::assemble_parts(in);
  }
  if (!content.state.contains("optimizer_shards"))
    throw io::CheckpointError(from.string() + ": no optimizer.safetensors in this checkpoint");
  const auto& layout = content.state.at("optimizer_shards");
  const int64_t world = layout.at("world_size").get<int64_t>();
  if (world < 1 || world > (1 << 20)) throw io::CheckpointError((from / "state.json").string() + ": bad shard world size");
  ShardMaps shards(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) {
    auto g = content.groups.find(shard_group_name(r, world));
    if (g == content.groups.end())
      throw io::CheckpointError((from / (shard_group_name(r, world) + ".safetensors")).string() +
                                ": shard missing from this checkpoint");
    shards[static_cast<size_t>(r)] = std::map<std::string, torch::Tensor>(g->second.begin(), g->second.end());
  }
  io::NamedTensors out;
  for (const auto& e : layout.at("params")) {
    const auto name = e.at("name").get<std::string>();
    for (const std::string field : all_optim_state_names())
      if (field != "step")
        if (auto t = assemble_field(e, field, shards, from); t.defined()) out.emplace_back(name + "." + field, t);
    for (const auto& pc : e.at("pieces")) {  // AdamW's step count, the same in every piece
      const auto& shard = shards.at(pc.at(0).get<size_t>());
      if (auto t = shard.find(name + ".step"); t != shard.end()) {
        out.emplace_back(name + ".step", t->second.clone());
        break;
      }
    }
  }
  return out;
}

void load_shard_optimizer(const dist::ShardSync& sync, torch::optim::Optimizer& opt, const torch::nn::Module& model,
                          const io::NamedTensors& full) {
  const auto kind = optim_state_kind(opt);
  const auto names = shard_param_names(sync, model);
  std::map<std::string, torch::Tensor> given(full.begin(), full.end());
  auto slice = [&](const dist::OwnedPiece& pc, const std::string& key) -> torch::Tensor {
    auto it = given.find(key);
    if (it == given.end()) return {};
    const auto& p = sync.params()[pc.param];
    if (it->second.sizes() != p.sizes())
      throw std::runtime_error("optimizer state does not match this model: " + key + " has shape " +
                               c10::str(it->second.sizes()) + ", the parameter " + c10::str(p.sizes()));
    return storage_order(it->second.to(p.scalar_type()), p).narrow(0, pc.begin, pc.len).to(p.device()).clone();
  };
  std::set<std::string> known;
  for (const auto& n : names)
    for (const std::string f : all_optim_state_names()) known.insert(n + "." + f);
  for (const auto& [key, t] : given)
    if (!known.count(key)) throw std::runtime_error("optimizer state does not match this model: " + key +
                                                    ": no such parameter state in this optimizer");
  opt.state().clear();
  for (const auto& pc : sync.pieces()) {
    const std::string& name = names[pc.param];
    std::optional<int64_t> step;
    if (auto it = given.find(name + ".step"); kind == OptimStateKind::Adamw && it != given.end())
      step = it->second.item<int64_t>();
    auto s = make_param_state(kind, step, [&](const char* field) { return slice(pc, name + "." + field); });
    if (!s) continue;  // never stepped (or SGD without momentum)
    if (!state_complete(*s))
      throw std::runtime_error("optimizer state does not match this model: " + name + ": incomplete AdamW state");
    opt.state()[pc.value.unsafeGetTensorImpl()] = std::move(s);
  }
}

}  // namespace trainer::engine
