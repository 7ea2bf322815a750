// The config schema: one FieldInfo per key, pointing into a RunConfig. Loading, overrides,
// validation of types and ranges, dumping, and the key list in docs/CONFIG.md all come from it.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "config/config.hpp"

namespace trainer::config {

// StringList: a YAML list of strings; PrefixMap: a YAML mapping of strings to strings, in file order;
// GroupList: optim.groups, a list of mappings {match, lr, weight_decay}.
enum class FieldType { Bool, Int, Float, String, Choice, FloatList, Path, StringList, PrefixMap, GroupList };
using PrefixPairs = std::vector<std::pair<std::string, std::string>>;

struct FieldInfo {
  std::string key;  // full dotted path, e.g. "optim.lr"
  FieldType type = FieldType::String;
  std::string doc;
  double min = -std::numeric_limits<double>::infinity();  // inclusive bounds for Int / Float
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // Choice only
  std::vector<std::string> applies_to;  // model keys: the archs it applies to ("resnet", ...); empty = any arch
  bool accepts_auto = false;         // Int only: the word `auto` is accepted and stored as 0
  bool regex = false;                // StringList: every entry must compile as a std::regex (ECMAScript)
  std::variant<bool*, int64_t*, double*, std::string*, std::vector<double>*, std::vector<std::string>*, PrefixPairs*,
               std::vector<ParamGroupRule>*>
      ref;
};

// True when `f` applies to model.arch `arch` (keys without an arch apply to every arch).
bool applies_to_arch(const FieldInfo& f, const std::string& arch);
// "resnet, vit": the archs of a model key, for messages and docs ("" for any arch).
std::string applies_text(const FieldInfo& f);

// What the config layer knows of each model family, for the checks that must run before any model
// exists (validate(), the data readers' checks of data against model), since config is the lowest
// layer and cannot ask the model registry. Kept next to the keys because, like `applies_to`, it is
// schema-level metadata; the models' tests check that every registered model agrees with it
// (input kind, and that the list equals the registry's).
enum class ArchInput { Image, Tokens };
struct ArchInfo {
  std::string name;
  ArchInput input;
  bool fixed_image_size;  // images must be model.image_size square (ViT: the position embedding's length)
};
const std::vector<ArchInfo>& arch_infos();             // sorted by name
const ArchInfo* find_arch(const std::string& name);    // nullptr for an unknown arch
// A language model (token inputs, vocab_size classes, block_size samples); false for an unknown arch.
bool takes_tokens(const std::string& arch);

// Every key of the schema, in documentation order, bound to the members of `cfg`.
std::vector<FieldInfo> describe_fields(RunConfig& cfg);

// The top-level section names ("run", "model", ...) in order.
const std::vector<std::string>& section_names();

std::string type_name(const FieldInfo& f);     // "int", "float", "one of a|b", ...
std::string value_text(const FieldInfo& f);     // the bound value as YAML scalar / flow text
std::string default_text(const FieldInfo& f);   // the value in a default RunConfig

// Closest known name to `unknown` among `candidates`, or "" when none is close enough.
std::string did_you_mean(const std::string& unknown, const std::vector<std::string>& candidates);

}  // namespace trainer::config
