#include "config/stage_list.hpp"

#include <cctype>

#include "config/load.hpp"

namespace trainer::config {

std::optional<UnitRange> parse_stage_entry(const std::string& e, std::string& why) {
  auto number = [](const std::string& s, int64_t& v) {
    if (s.empty() || s.size() > 6) return false;
    for (char ch : s)
      if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
    v = std::stoll(s);
    return true;
  };
  const auto dash = e.find('-');
  UnitRange r;
  bool ok = false;
  if (dash == std::string::npos) {
    ok = number(e, r.first);
    r.last = r.first;
  } else {
    ok = number(e.substr(0, dash), r.first) && number(e.substr(dash + 1), r.last);
  }
  if (!ok) {
    why = "'" + printable(e) + "' is not a unit range: expected \"A-B\" (units A to B, inclusive) or \"A\", unit indices as "
          "`trainer check` lists them";
    return std::nullopt;
  }
  return r;
}

std::string stage_entry_text(const UnitRange& r) {
  return r.first == r.last ? std::to_string(r.first) : std::to_string(r.first) + "-" + std::to_string(r.last);
}

std::string check_stage_list(const std::vector<UnitRange>& list, const std::vector<std::string>& names, int64_t stages) {
  const auto n = static_cast<int64_t>(names.size());
  auto name = [&](int64_t u) { return u >= 0 && u < n ? names[static_cast<size_t>(u)] : "unit " + std::to_string(u); };
  std::vector<int> seen(static_cast<size_t>(n), 0);
  std::string bad;
  auto add = [&](const std::string& e) { bad += (bad.empty() ? "" : "; ") + e; };
  for (size_t s = 0; s < list.size(); ++s) {
    const auto& r = list[s];
    if (r.first > r.last) add("stage " + std::to_string(s) + " is empty (" + std::to_string(r.first) + " > " + std::to_string(r.last) + ")");
    if (r.first < 0 || r.last >= n) add("stage " + std::to_string(s) + " names units outside 0.." + std::to_string(n - 1));
    for (int64_t u = std::max<int64_t>(r.first, 0); u <= std::min(r.last, n - 1); ++u) ++seen[static_cast<size_t>(u)];
    if (s > 0 && r.first <= list[s - 1].last && r.first >= 0)
      add("stage " + std::to_string(s) + " starts at " + name(r.first) + ", not after stage " + std::to_string(s - 1) +
          "'s last unit " + name(list[s - 1].last) + " (stages go in forward order)");
  }
  std::string missing, doubled;
  for (int64_t u = 0; u < n; ++u) {
    if (seen[static_cast<size_t>(u)] == 0) missing += (missing.empty() ? "" : ", ") + name(u);
    if (seen[static_cast<size_t>(u)] > 1) doubled += (doubled.empty() ? "" : ", ") + name(u);
  }
  if (!missing.empty()) add("no stage holds " + missing);
  if (!doubled.empty()) add("more than one stage holds " + doubled);
  if (static_cast<int64_t>(list.size()) != stages)
    add(std::to_string(list.size()) + " stages listed, the layout has " + std::to_string(stages));
  return bad;
}

}  // namespace trainer::config
