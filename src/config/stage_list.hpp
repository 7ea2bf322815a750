// dist.pipeline.stages as a list: which of the model's units (models::Model::units(), embeddings and
// head included, in forward order) each pipeline stage holds. Parsed and checked at config load
// against the units the family's ArchRules name, so a list that misses or doubles a unit stops the
// run before anything starts (exit 2, naming the units); pipeline/partition.hpp balances `auto`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainer::config {

struct UnitRange {
  int64_t first = 0, last = 0;  // unit indices, inclusive
  int64_t size() const { return last - first + 1; }
  bool operator==(const UnitRange&) const = default;
};

// One entry: "A-B" (units A to B, inclusive) or "A", A and B unit indices. nullopt when it is
// neither (`why` says what was expected).
std::optional<UnitRange> parse_stage_entry(const std::string& entry, std::string& why);

// The ranges must cover units 0 .. n-1 in order, each unit exactly once, and be `stages` in number.
// Returns what is wrong, naming the missing, doubled or out-of-order units by `unit_names` ("" when
// the list is good).
std::string check_stage_list(const std::vector<UnitRange>& list, const std::vector<std::string>& unit_names,
                             int64_t stages);

// "0-2" / "3": the text of a range as the config writes it.
std::string stage_entry_text(const UnitRange& r);

}  // namespace trainer::config
