// Checkpoint groups in parts (tensor_parts.hpp).
#include "io/tensor_parts.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

namespace trainer::io {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void parts_fail(const std::string& where, const std::string& what) { throw CheckpointError(where + ": " + what); }

std::string parts_shape_text(const std::vector<int64_t>& s) { return c10::str(c10::IntArrayRef(s)); }

// The ranges a part's metadata gives, checked against its tensors: every ranged name is one of its
// tensors, of the global shape but along dim, where it has the ranges' total length.
std::map<std::string, PartRanges> decode_ranges(const SafetensorsFile& f) {
  std::map<std::string, PartRanges> out;
  auto it = f.metadata.find(kRangesKey);
  if (it == f.metadata.end()) return out;
  std::map<std::string, const torch::Tensor*> tensors;
  for (const auto& [name, t] : f.tensors) tensors[name] = &t;
  try {
    const auto j = nlohmann::json::parse(it->second);
    for (const auto& [name, e] : j.items()) {
      PartRanges r;
      r.dim = e.at("dim").get<int64_t>();
      r.shape = e.at("shape").get<std::vector<int64_t>>();
      for (const auto& pr : e.at("ranges")) r.ranges.emplace_back(pr.at(0).get<int64_t>(), pr.at(1).get<int64_t>());
      auto t = tensors.find(name);
      if (t == tensors.end()) parts_fail(f.path, "its ranges name '" + name + "', a tensor it does not hold");
      const auto& local = *t->second;
      if (r.dim < 0 || r.dim >= static_cast<int64_t>(r.shape.size()) || local.dim() != static_cast<int64_t>(r.shape.size()))
        parts_fail(f.path, name + ": dim " + std::to_string(r.dim) + " of a global shape " + parts_shape_text(r.shape) +
                         " does not fit its tensor of shape " + parts_shape_text(local.sizes().vec()));
      int64_t len = 0;
      for (const auto& [b, e2] : r.ranges) {
        if (b < 0 || e2 <= b || e2 > r.shape[r.dim])
          parts_fail(f.path, name + ": range [" + std::to_string(b) + ", " + std::to_string(e2) + ") outside the global " +
                           parts_shape_text(r.shape) + " along dim " + std::to_string(r.dim));
        len += e2 - b;
      }
      for (int64_t d = 0; d < local.dim(); ++d)
        if (local.size(d) != (d == r.dim ? len : r.shape[d]))
          parts_fail(f.path, name + ": holds shape " + parts_shape_text(local.sizes().vec()) + ", its ranges of the global " +
                           parts_shape_text(r.shape) + " make " + std::to_string(len) + " along dim " + std::to_string(r.dim));
      out[name] = std::move(r);
    }
  } catch (const nlohmann::json::exception& e) {
    parts_fail(f.path, std::string("malformed '") + kRangesKey + "' metadata: " + e.what());
  }
  return out;
}

nlohmann::json read_state(const fs::path& dir) {
  const auto path = dir / "state.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) parts_fail(path.string(), "cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    parts_fail(path.string(), std::string("invalid JSON: ") + e.what());
  }
}

// (parts, groups) of state.json's kStateTensorParts; parts 0 when the checkpoint has none.
std::pair<int64_t, std::vector<std::string>> parts_of(const nlohmann::json& state, const fs::path& dir) {
  if (!state.contains(kStateTensorParts)) return {0, {}};
  try {
    const auto& e = state.at(kStateTensorParts);
    const int64_t parts = e.at("parts").get<int64_t>();
    if (parts < 1 || parts > 4096) parts_fail((dir / "state.json").string(), "tensor_parts.parts " + std::to_string(parts) + " is not in [1, 4096]");
    return {parts, e.at("groups").get<std::vector<std::string>>()};
  } catch (const nlohmann::json::exception& e) {
    parts_fail((dir / "state.json").string(), std::string("malformed tensor_parts: ") + e.what());
  }
}

// A file says in its metadata which save wrote it (step) and as what (checkpoint_group): a part or
// shard from another save (a stale staged file, a folder put together by hand, re-signed) was assembled
// in silence (found from outside). Files without the keys (none written so) are let be.
void check_file_is_of(const nlohmann::json& state, const std::string& group, const SafetensorsFile& f,
                      const fs::path& dir) {
  const fs::path file = dir / (group + ".safetensors");
  // the checkpoint's step: its folder's name (step-N, which the manifest agrees with), else state.json's
  // (a folder named otherwise); a state.json that disagrees with its folder is named by its own check
  std::optional<std::string> step;
  const std::string folder = dir.filename().string();
  if (folder.rfind("step-", 0) == 0 && folder.size() > 5 &&
      folder.find_first_not_of("0123456789", 5) == std::string::npos)
    step = folder.substr(5);
  else if (auto st = state.find("step"); st != state.end() && st->is_number_integer())
    step = std::to_string(st->get<int64_t>());
  if (auto s = f.metadata.find("step"); s != f.metadata.end() && step && s->second != *step)
    parts_fail(file.string(), "was written by the save of step " + s->second +
                                  " (its metadata), but this checkpoint is of step " + *step +
                                  ": a file from another checkpoint");
  if (auto g = f.metadata.find("checkpoint_group"); g != f.metadata.end() && g->second != group)
    parts_fail(file.string(), "holds checkpoint_group '" + g->second + "' (its metadata), not '" + group +
                                  "': a file renamed from another part");
}

}  // namespace

std::string part_group_name(const std::string& group, int64_t part, int64_t parts) {
  return group + "-part" + std::to_string(part) + "of" + std::to_string(parts);
}

std::string encode_ranges(const std::map<std::string, PartRanges>& ranges) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, r] : ranges) {
    nlohmann::json rs = nlohmann::json::array();
    for (const auto& [b, e] : r.ranges) rs.push_back({b, e});
    j[name] = {{"dim", r.dim}, {"shape", r.shape}, {"ranges", rs}};
  }
  return j.dump();
}

NamedTensors assemble_parts(const std::vector<SafetensorsFile>& parts) {
  if (parts.empty()) throw CheckpointError("no parts to assemble");
  std::vector<std::map<std::string, PartRanges>> ranges;
  std::vector<std::map<std::string, const torch::Tensor*>> tensors(parts.size());
  for (size_t k = 0; k < parts.size(); ++k) {
    ranges.push_back(decode_ranges(parts[k]));
    for (const auto& [name, t] : parts[k].tensors) tensors[k][name] = &t;
  }
  // the names in part 0's order, then any only later parts hold (a slice that is all padding is
  // left out of its part, so a part may lack a name; the coverage check finds a real gap)
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& p : parts)
    for (const auto& [name, t] : p.tensors)
      if (seen.insert(name).second) names.push_back(name);
  NamedTensors out;
  for (const auto& name : names) {
    const PartRanges* first = nullptr;
    const torch::Tensor* first_t = nullptr;
    for (size_t k = 0; k < parts.size() && !first; ++k)
      if (auto rk = ranges[k].find(name); rk != ranges[k].end()) {
        first = &rk->second;
        first_t = tensors[k].at(name);
      }
    if (!first) {  // whole: held by exactly one part (tp rank 0 of the stage that owns it)
      const torch::Tensor* whole = nullptr;
      for (size_t k = 0; k < parts.size(); ++k) {
        auto it = tensors[k].find(name);
        if (it == tensors[k].end()) continue;
        if (whole) parts_fail(parts[k].path, name + ": a whole tensor that another part holds too");
        whole = it->second;
      }
      out.emplace_back(name, *whole);
      continue;
    }
    const auto& shape = first->shape;
    const int64_t dim = first->dim;
    auto full = torch::zeros(shape, first_t->options());
    auto covered = torch::zeros({shape[dim]}, torch::kInt32);
    for (size_t k = 0; k < parts.size(); ++k) {
      auto rk = ranges[k].find(name);
      if (rk == ranges[k].end()) {
        if (tensors[k].count(name)) parts_fail(parts[k].path, name + ": whole here, a slice in another part");
        continue;
      }
      if (rk->second.shape != shape || rk->second.dim != dim)
        parts_fail(parts[k].path, name + ": global shape " + parts_shape_text(rk->second.shape) + " along dim " +
                                std::to_string(rk->second.dim) + ", another part says " + parts_shape_text(shape) +
                                " along " + std::to_string(dim));
      const auto& local = *tensors[k].at(name);
      if (local.scalar_type() != first_t->scalar_type()) parts_fail(parts[k].path, name + ": another dtype than in the other parts");
      int64_t off = 0;
      for (const auto& [b, e] : rk->second.ranges) {
        full.narrow(dim, b, e - b).copy_(local.narrow(dim, off, e - b));
        covered.narrow(0, b, e - b).add_(1);
        off += e - b;
      }
    }
    if (!covered.eq(1).all().item<bool>())
      parts_fail(parts[0].path, name + ": its parts do not cover each of its " + std::to_string(shape[dim]) +
                              " rows along dim " + std::to_string(dim) + " exactly once");
    out.emplace_back(name, full);
  }
  return out;
}

void assemble_checkpoint_parts(CheckpointContent& c, std::map<std::string, SafetensorsFile>& files,
                               const fs::path& dir) {
  for (const auto& [group, f] : files) check_file_is_of(c.state, group, f, dir);
  const auto [parts, groups] = parts_of(c.state, dir);
  for (const auto& g : groups) {
    std::vector<SafetensorsFile> in;
    for (int64_t k = 0; k < parts; ++k) {
      const auto name = part_group_name(g, k, parts);
      auto f = files.find(name);
      if (f == files.end()) parts_fail((dir / (name + ".safetensors")).string(), "missing (state.json lists " + std::to_string(parts) + " parts of " + g + ")");
      in.push_back(std::move(f->second));
      files.erase(f);
      c.groups.erase(name);
    }
    c.groups[g] = assemble_parts(in);
  }
}

SafetensorsFile load_checkpoint_group(const fs::path& dir, const std::string& group) {
  const auto whole = dir / (group + ".safetensors");
  if (fs::exists(whole)) {
    auto f = load_safetensors(whole.string());
    if (fs::exists(dir / "state.json")) check_file_is_of(read_state(dir), group, f, dir);
    return f;
  }
  const auto state = read_state(dir);
  const auto [parts, groups] = parts_of(state, dir);
  if (std::find(groups.begin(), groups.end(), group) == groups.end()) parts_fail(whole.string(), "missing");
  std::vector<SafetensorsFile> in;
  for (int64_t k = 0; k < parts; ++k) {
    const auto file = dir / (part_group_name(group, k, parts) + ".safetensors");
    if (!fs::exists(file)) parts_fail(file.string(), "missing (state.json lists " + std::to_string(parts) + " parts of " + group + ")");
    in.push_back(load_safetensors(file.string()));
    check_file_is_of(state, part_group_name(group, k, parts), in.back(), dir);
  }
  SafetensorsFile out;
  out.tensors = assemble_parts(in);
  out.metadata = in.front().metadata;
  out.metadata.erase(kRangesKey);
  out.path = (dir / (part_group_name(group, 0, parts) + ".safetensors")).string();  // for messages
  return out;
}

}  // namespace trainer::io
