#include "models/init_load.hpp"

#include <unordered_map>
#include <unordered_set>

#include "config/file_read.hpp"
#include "config/name_pattern.hpp"
#include "io/safetensors.hpp"
#include "io/torch_pickle.hpp"
#include "io/weight_copy.hpp"

namespace trainer::models {
namespace {

// A state_dict file is read whole into memory; beyond this it is refused before allocating.
constexpr uint64_t kInitMaxFileBytes = uint64_t(64) << 30;

[[noreturn]] void init_fail(const std::string& path, const std::string& why) { throw InitLoadError(path + ": " + why); }

std::string init_shape_text(c10::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

StateFile read_torch_save(const std::string& path, const std::string& bytes) {
  try {
    return StateFile{path, "torch.save", io::read_torch_state_dict(path, bytes)};
  } catch (const io::TorchSaveError& e) {
    throw InitLoadError(e.what());
  }
}

}  // namespace

StateFile read_state_file(const std::string& path) {
  std::string bytes;
  try {
    bytes = RegularFile::open(path, kInitMaxFileBytes, "a weights file").read_all();
  } catch (const FileReadError& e) {
    throw InitLoadError(e.what());
  }
  if (bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0) return read_torch_save(path, bytes);
  // pickle protocol 2 opens a legacy torch.save file (_use_new_zipfile_serialization=False)
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 && bytes[1] == 0x02)
    init_fail(path, "a legacy torch.save file (not the zip format of PyTorch >= 1.6), which LibTorch cannot read; "
                    "load and save it again with torch.save in PyTorch >= 1.6");
  bytes.clear();
  bytes.shrink_to_fit();
  try {
    auto f = io::load_safetensors(path);
    return StateFile{path, "safetensors", std::move(f.tensors)};
  } catch (const io::SafetensorsError& e) {
    throw InitLoadError(std::string(e.what()) + " (read as safetensors: it is no torch.save zip archive)");
  }
}

std::string name_list(const std::vector<std::string>& names, size_t limit) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += ", ... and " + std::to_string(names.size() - limit) + " more";
  return s;
}

namespace {

// The model's tensors by every name a state_dict may use (registered names and TiedState aliases).
struct InitTargets {
  std::unordered_map<std::string, torch::Tensor> tensor;  // registered name -> tensor
  std::vector<std::string> order;
  std::unordered_map<std::string, std::string> owner_of;  // alias -> registered name

  explicit InitTargets(const torch::nn::Module& m) {
    for (const auto& p : m.named_parameters(true)) tensor[p.key()] = p.value(), order.push_back(p.key());
    for (const auto& b : m.named_buffers(true)) tensor[b.key()] = b.value(), order.push_back(b.key());
    if (const auto* tied = dynamic_cast<const io::TiedState*>(&m))
      for (const auto& [alias, owner] : tied->tied_names()) owner_of[alias] = owner;
  }
  std::string owner(const std::string& name) const {
    auto it = owner_of.find(name);
    return it == owner_of.end() ? name : it->second;
  }
};

std::string renamed_name(const std::string& name, const config::InitConfig& init) {
  for (const auto& [from, to] : init.rename)
    if (name.rfind(from, 0) == 0) return to + name.substr(from.size());
  return name;
}

bool init_skipped(const std::string& name, const std::vector<config::NamePattern>& skip) {
  for (const auto& re : skip)
    if (re.found_in(name)) return true;
  return false;
}

struct InitPlan {
  InitReport report;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (model tensor, file tensor)
  std::vector<std::string> mis_shaped, conflicting, unfaithful, nonfinite;
};

InitPlan plan_init(const InitTargets& targets, const config::InitConfig& init, const StateFile& file) {
  std::vector<config::NamePattern> skip;
  for (const auto& s : init.skip) skip.emplace_back(s);  // checked when the config loaded
  InitPlan plan;
  auto& r = plan.report;
  std::unordered_map<std::string, const torch::Tensor*> source;  // registered name -> file tensor
  std::unordered_set<std::string> covered;                        // registered names skipped or re-initialised
  for (const auto& [file_name, t] : file.tensors) {
    const std::string name = renamed_name(file_name, init);
    const std::string owner = targets.owner(name);
    if (init_skipped(file_name, skip)) {
      r.skipped.push_back(file_name);
      covered.insert(owner);
      continue;
    }
    if (name != file_name) r.renamed.emplace_back(file_name, name);
    auto it = targets.tensor.find(owner);
    if (it == targets.tensor.end()) {
      r.unexpected.push_back(file_name);
      continue;
    }
    if (auto prev = source.find(owner); prev != source.end()) {  // both names of a tied tensor
      if (!prev->second->sizes().equals(t.sizes()) || !torch::equal(*prev->second, t)) plan.conflicting.push_back(name);
      else r.loaded.push_back(name);  // the same values under the alias: reported as loaded too
      continue;
    }
    const auto& want = it->second;
    if (!t.sizes().equals(want.sizes())) {
      const std::string what = name + ": file " + init_shape_text(t.sizes()) + ", model " + init_shape_text(want.sizes());
      (init.reinit_mismatched ? r.reinitialised : plan.mis_shaped).push_back(what);
      covered.insert(owner);
      continue;
    }
    if (auto why = io::weight_copy_problem(t, want)) {
      plan.unfaithful.push_back(name + ": " + *why);
      covered.insert(owner);
      continue;
    }
    // NaN or infinity: the run failed at its fifth step advising a lower learning rate, naming nothing
    if (t.is_floating_point())
      if (const int64_t bad = t.numel() - torch::isfinite(t).sum().item<int64_t>(); bad > 0) {
        plan.nonfinite.push_back(name + " (" + std::to_string(bad) + " of " + std::to_string(t.numel()) + ")");
        covered.insert(owner);
        continue;
      }
    if (const auto c = io::weight_conversion(t, want); !c.empty()) r.converted.push_back(name + " (" + c + ")");
    source[owner] = &t;
    r.loaded.push_back(name);
    plan.copies.emplace_back(want, t);
  }
  for (const auto& name : targets.order)
    if (!source.count(name) && !covered.count(name)) r.missing.push_back(name);
  return plan;
}

}  // namespace

InitReport load_init_weights(torch::nn::Module& m, const config::InitConfig& init, const StateFile& file) {
  const InitTargets targets(m);
  InitPlan plan = plan_init(targets, init, file);
  plan.report.path = file.path;
  plan.report.format = file.format;
  const auto& r = plan.report;
  std::string problems;
  auto add = [&](const std::string& what, const std::vector<std::string>& v, const std::string& hint) {
    if (!v.empty()) problems += "; " + what + " (" + std::to_string(v.size()) + "): " + name_list(v, 20) + hint;
  };
  add("mis-shaped", plan.mis_shaped, " (model.init.reinit_mismatched: true keeps the model's initialisation there)");
  add("tied tensors that differ", plan.conflicting, "");
  add("dtypes that cannot be loaded faithfully", plan.unfaithful, "");
  add("NaN or infinite values", plan.nonfinite, " (weights of a run that diverged, or a damaged file)");
  if (init.strict) {
    add("missing", r.missing, " (model.init.strict: false accepts them)");
    add("unexpected", r.unexpected, " (model.init.skip or model.init.rename, or strict: false)");
  }
  if (!problems.empty()) init_fail(file.path, "does not match the model" + problems);
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : plan.copies)  // keeps dst's device, dtype and memory format
    if (!io::is_released(dst)) dst.copy_(src);  // released: another pp rank holds (and loads) it
  return plan.report;
}

InitReport load_init_weights(torch::nn::Module& m, const config::InitConfig& init, const std::string& path) {
  return load_init_weights(m, init, read_state_file(path));
}

}  // namespace trainer::models
