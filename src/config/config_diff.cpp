#include "config/config_diff.hpp"

#include "config/schema.hpp"

namespace trainer::config {

std::vector<KeyChange> training_changes(const RunConfig& before, const RunConfig& after) {
  RunConfig a = before, b = after;
  const auto fa = describe_fields(a), fb = describe_fields(b);  // the same keys in the same order
  const auto& ta = before.train;
  const auto& tb = after.train;
  std::vector<KeyChange> out;
  for (size_t i = 0; i < fa.size() && i < fb.size(); ++i) {
    if (!fa[i].changes_training) continue;
    const std::string va = value_text(fa[i]), vb = value_text(fb[i]);
    if (va == vb) continue;
    const bool same_batch = ta.batch_size == tb.batch_size;
    if (fa[i].key == "train.global_batch_size" && same_batch && ta.grad_accum == tb.grad_accum) continue;
    if (fa[i].key == "train.grad_accum" && same_batch && ta.global_batch_size == tb.global_batch_size) continue;
    out.push_back({fa[i].key, va, vb});
  }
  return out;
}

std::string changes_text(const std::vector<KeyChange>& changes) {
  std::string s;
  for (const auto& c : changes) s += (s.empty() ? "" : ", ") + c.key + " " + c.before + " -> " + c.after;
  return s;
}

}  // namespace trainer::config
