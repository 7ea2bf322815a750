// YAML -> the list and mapping keys: train.freeze, model.init.skip (regex lists), model.init.rename
// (a prefix mapping, in file order), optim.groups (a list of {match, lr, weight_decay}).
#include "config/load_lists.hpp"

#include "config/name_pattern.hpp"

#include <cmath>
#include <map>
#include <sstream>

namespace trainer::config {
namespace {

class CollectionReader {
 public:
  CollectionReader(const FieldInfo& f, const Location& where, const std::string& file, std::vector<Diagnostic>& diags)
      : f_(f), where_(where), file_(file), diags_(diags) {}

  void strings(const YAML::Node& n) {
    std::vector<std::string> v;
    if (f_.accepts_auto && n.IsScalar() && n.Scalar() == "auto") {  // stored as the empty list
      std::get<std::vector<std::string>*>(f_.ref)->clear();
      return;
    }
    if (!n.IsNull()) {  // "freeze:" with nothing = none
      if (!n.IsSequence())
        return error(where_, std::string("expected a list of strings such as ") +
                                 (f_.accepts_auto ? "[\"0-2\", \"3-5\"] or auto" : "['^fc\\.']") + ", got " + shown(n));
      // `auto` is the empty list inside: [] ran as auto in silence (found from outside)
      if (f_.accepts_auto && n.size() == 0)
        return error(where_, "an empty list; give one entry per stage such as [\"0-2\", \"3-5\"], or auto");
      bool ok = true;
      for (const auto& e : n) {
        std::string s;
        ok = entry(e, f_.regex, s) && ok;
        v.push_back(s);
      }
      if (!ok) return;
    }
    *std::get<std::vector<std::string>*>(f_.ref) = v;
  }

  void prefixes(const YAML::Node& n) {
    PrefixPairs v;
    if (!n.IsNull()) {
      if (!n.IsMap()) return error(where_, "expected a mapping of prefixes such as {\"module.\": \"\"}, got " + shown(n));
      bool ok = true;
      std::map<std::string, int> seen;  // a prefix given twice: which rename applies would be silent
      for (auto it = n.begin(); it != n.end(); ++it) {
        std::string from, to;
        ok = entry(it->first, false, from) && ok;
        ok = fresh(seen, from, it->first) && ok;
        if (!it->second.IsNull()) ok = entry(it->second, false, to) && ok;  // "module.:" maps to ""
        if (ok && from.empty()) {
          error(at(it->first), "an empty prefix matches every name; give the prefix to replace");
          ok = false;
        }
        v.emplace_back(from, to);
      }
      if (!ok) return;
    }
    *std::get<PrefixPairs*>(f_.ref) = v;
  }

  void groups(const YAML::Node& n) {
    std::vector<ParamGroupRule> v;
    if (!n.IsNull()) {
      if (!n.IsSequence()) return error(where_, "expected a list of {match: REGEX, lr: X, weight_decay: Y}, got " + shown(n));
      bool ok = true;
      for (const auto& e : n) {
        ParamGroupRule g;
        ok = group(e, g) && ok;
        v.push_back(g);
      }
      if (!ok) return;
    }
    *std::get<std::vector<ParamGroupRule>*>(f_.ref) = v;
  }

 private:
  Location at(const YAML::Node& n) const {
    const auto m = n.Mark();
    if (where_.line == 0 || m.is_null() || m.line < 0) return where_;  // --set: the value has no lines
    return Location{file_, m.line + 1, m.column + 1};
  }
  void error(const Location& where, const std::string& msg) { diags_.push_back(Diagnostic{where, f_.key, msg}); }
  static std::string shown(const YAML::Node& n) {
    if (n.IsScalar()) return "'" + printable(n.Scalar()) + "'";
    if (n.IsNull()) return "nothing";
    return n.IsSequence() ? "a list" : "a mapping";
  }

  // One string: UTF-8 (it ends up in JSON), and for a regex field one that compiles, so a bad pattern
  // stops the run here with its position instead of after start-up.
  bool entry(const YAML::Node& e, bool regex, std::string& out) {
    if (!e.IsScalar()) {
      error(at(e), "expected a string, got " + shown(e));
      return false;
    }
    out = e.Scalar();
    if (first_invalid_utf8(out)) {
      error(at(e), "'" + printable(out) + "' is not valid UTF-8; config text must be UTF-8");
      return false;
    }
    if (!regex) return true;
    if (auto why = NamePattern::problem(out)) {
      error(at(e), "'" + printable(out.substr(0, 80)) + (out.size() > 80 ? "...' " : "' ") + *why);
      return false;
    }
    return true;
  }

  bool group(const YAML::Node& e, ParamGroupRule& g) {
    if (!e.IsMap()) {
      error(at(e), "each group is a mapping {match: REGEX, lr: X, weight_decay: Y}, got " + shown(e));
      return false;
    }
    bool ok = true, has_match = false;
    std::map<std::string, int> seen;  // the later value won in silence: `match` given twice lost a group
    for (auto it = e.begin(); it != e.end(); ++it) {
      const std::string name = it->first.IsScalar() ? it->first.Scalar() : "";
      if (!fresh(seen, name, it->first)) {
        ok = false;
      } else if (name == "match") {
        has_match = true;
        ok = entry(it->second, true, g.match) && ok;
      } else if (name == "lr" || name == "weight_decay") {
        ok = number(it->first, it->second, name == "lr" ? g.lr : g.weight_decay) && ok;
      } else {
        error(at(it->first), "unknown group key '" + printable(name) + "'; a group has match, lr, weight_decay");
        ok = false;
      }
    }
    if (!has_match) error(at(e), "a group needs `match:` (a regex of parameter names)");
    return ok && has_match;
  }

  // false (and an error at the key) when `name` was seen before in this mapping
  bool fresh(std::map<std::string, int>& seen, const std::string& name, const YAML::Node& key) {
    const Location where = at(key);
    if (auto [pos, first] = seen.emplace(name, where.line); !first) {
      error(where, "duplicate key '" + printable(name) + "' (first set at line " + std::to_string(pos->second) + ")");
      return false;
    }
    return true;
  }

  bool number(const YAML::Node& key, const YAML::Node& value, std::optional<double>& out) {
    const bool lr = key.Scalar() == "lr";
    const double hi = lr ? 1e3 : 10;  // the ranges of optim.lr and optim.weight_decay
    double x = 0;
    if (!value.IsScalar() || !YAML::convert<double>::decode(value, x) || !std::isfinite(x) || x < 0 || x > hi) {
      std::ostringstream m;
      m << key.Scalar() << ": expected a number in [0, " << hi << "], got " << shown(value);
      error(at(value), m.str());
      return false;
    }
    out = x;
    return true;
  }

  const FieldInfo& f_;
  Location where_;
  const std::string& file_;
  std::vector<Diagnostic>& diags_;
};

}  // namespace

void assign_collection(const FieldInfo& f, const YAML::Node& n, const Location& where, const std::string& file,
                       std::vector<Diagnostic>& diags) {
  CollectionReader r(f, where, file, diags);
  if (f.type == FieldType::StringList) r.strings(n);
  else if (f.type == FieldType::PrefixMap) r.prefixes(n);
  else r.groups(n);
}

}  // namespace trainer::config
