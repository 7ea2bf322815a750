#include "config/arch.hpp"

#include <algorithm>
#include <mutex>
#include <stdexcept>

namespace trainer::config {
namespace {

std::vector<ArchRules>& arch_table() {
  static std::vector<ArchRules> table;
  return table;
}
std::mutex& arch_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

void register_arch(ArchRules rules) {
  std::lock_guard lock(arch_mutex());
  auto& t = arch_table();
  for (const auto& a : t)
    if (a.name == rules.name) throw std::logic_error("model arch '" + rules.name + "' is registered twice");
  if (rules.eval_metrics.empty()) throw std::logic_error("model arch '" + rules.name + "' registers no eval metric");
  t.push_back(std::move(rules));
  std::sort(t.begin(), t.end(), [](const ArchRules& a, const ArchRules& b) { return a.name < b.name; });
}

const std::vector<ArchRules>& arch_infos() {
  std::lock_guard lock(arch_mutex());
  if (arch_table().empty())
    throw std::logic_error("no model family is registered: call models::register_builtin_archs() (models/builtin.hpp) at start-up");
  return arch_table();
}

std::vector<std::string> arch_names() {
  std::vector<std::string> out;
  for (const auto& a : arch_infos()) out.push_back(a.name);
  return out;
}

const ArchRules* find_arch(const std::string& name) {
  for (const auto& a : arch_infos())
    if (a.name == name) return &a;
  return nullptr;
}

bool takes_tokens(const std::string& arch) {
  const ArchRules* a = find_arch(arch);
  return a && a->input == ArchInput::Tokens;
}

}  // namespace trainer::config
