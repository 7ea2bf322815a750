// The config schema: one FieldInfo per key, pointing into a RunConfig. Loading, overrides,
// validation of types and ranges, dumping, and the key list in docs/CONFIG.md all come from it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "config/arch.hpp"
#include "config/config.hpp"

namespace trainer::config {

// StringList: a YAML list of strings; PrefixMap: a YAML mapping of strings to strings, in file order;
// GroupList: optim.groups, a list of mappings {match, lr, weight_decay}.
enum class FieldType { Bool, Int, Float, String, Choice, FloatList, Path, StringList, PrefixMap, GroupList };
using PrefixPairs = std::vector<std::pair<std::string, std::string>>;

// A Choice key bound to an enum member (config/enums.hpp): the index of the value in `choices`.
struct EnumRef {
  std::function<size_t()> get;
  std::function<void(size_t)> set;
};

struct FieldInfo {
  std::string key;  // full dotted path, e.g. "optim.lr"
  FieldType type = FieldType::String;
  std::string doc;
  double min = -std::numeric_limits<double>::infinity();  // inclusive bounds for Int / Float
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // Choice only
  // A model family's own key (model.depth, ...): it applies only to the archs whose ArchRules list it
  // (config/arch.hpp), filled in `applies_to` by describe_fields. Other keys apply to every arch.
  bool family_key = false;
  std::vector<std::string> applies_to;
  bool accepts_auto = false;         // Int only: the word `auto` is accepted and stored as auto_value
  int64_t auto_value = 0;            // what `auto` is stored as (0, or -1 where 0 means something else)
  bool changes_training = true;      // false: a resumed run may change it (where, how fast, how long, what it logs)
  bool regex = false;                // StringList: every entry must be a NamePattern (RE2 syntax)
  // Choice: string* or EnumRef
  std::variant<bool*, int64_t*, double*, std::string*, std::vector<double>*, EnumRef, std::vector<std::string>*,
               PrefixPairs*, std::vector<ParamGroupRule>*>
      ref;
};

// True when `f` applies to model.arch `arch` (keys without an arch apply to every arch).
bool applies_to_arch(const FieldInfo& f, const std::string& arch);
// "resnet, vit": the archs of a model key, for messages and docs ("" for any arch).
std::string applies_text(const FieldInfo& f);

// Every key of the schema, in documentation order, bound to the members of `cfg`.
std::vector<FieldInfo> describe_fields(RunConfig& cfg);

// The top-level section names ("run", "model", ...) in order.
const std::vector<std::string>& section_names();

std::string type_name(const FieldInfo& f);     // "int", "float", "one of a|b", ...
std::string value_text(const FieldInfo& f);     // the bound value as YAML scalar / flow text
std::string default_text(const FieldInfo& f);   // the value in a default RunConfig
// A number as a range or an error shows it: 6 significant digits when they give the value back, else
// as many as it takes (0.999999999 is no "1", which the range [0, 0.999999999] refuses).
std::string number_text(double v);
// Number literals yaml-cpp reads without complaint but not as written: an integer with a leading 0
// (010, -07: octal 8 to YAML 1.1, 10 to YAML 1.2), and a literal `text` read as `v` == 0 although a
// digit before its exponent is not 0 (1e-400: below the smallest double, where optim.lr 0 trains nothing).
bool leading_zero_integer(const std::string& text);
bool underflows_to_zero(const std::string& text, double v);
const FieldInfo& default_field(const FieldInfo& f);  // `f`'s field bound to a default RunConfig (kept for the process)

// Closest known name to `unknown` among `candidates`, or "" when none is close enough.
std::string did_you_mean(const std::string& unknown, const std::vector<std::string>& candidates);

}  // namespace trainer::config
