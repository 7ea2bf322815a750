// What the config layer knows of each model family: the facts and rules that must be checked before
// any model exists (validate(), the data readers' checks of data against model). Config is the
// lowest layer and cannot include models/, so each family's ModelSpec (models/model_spec.hpp)
// registers its ArchRules here at start-up (models::register_builtin_archs); nothing in src/
// names a family.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace trainer::config {

enum class ArchInput { Image, Tokens };

// Reports one problem: the key path it belongs to (its file:line:col is looked up) and the message.
using ErrFn = std::function<void(const std::string& key, const std::string& msg)>;

// One of a model's units as the config knows it before the model exists (pipeline stages): its name
// (Model::units()'s) and its estimated forward cost per sample, in FLOPs.
struct ArchUnit {
  std::string name;
  double cost = 0;
};

struct ArchRules {
  std::string name;                       // the model.arch value
  ArchInput input = ArchInput::Image;
  bool fixed_image_size = false;          // images must be model.image_size square (ViT's position embedding)
  // The smallest image side the model described by the config takes (the ConvNet's pooling);
  // empty: any size. Checked at config load where the config tells the size, else at data open.
  std::function<int64_t(const ModelConfig&)> min_image_side;
  std::vector<std::string> keys;          // the family's own model.* keys (full paths); others do not apply
  std::vector<std::string> eval_metrics;  // what its evaluation reports; the first is the default to watch
  std::function<void(const RunConfig&, const ErrFn&)> check;  // its cross-key rules (may be empty)
  // dist.pipeline_parallel: the units of the model `cfg` describes, in forward order, as its
  // Model::units() names them, with their costs. Empty: the family has no pipeline stages.
  std::function<std::vector<ArchUnit>(const ModelConfig&)> pipeline_units;
};

// Adds a family. A name registered twice is std::logic_error (register once, at start-up).
void register_arch(ArchRules rules);
// Every registered family, sorted by name. std::logic_error when none is registered: the program
// forgot models::register_builtin_archs (a loud failure, never an empty list of known archs).
const std::vector<ArchRules>& arch_infos();
std::vector<std::string> arch_names();           // sorted
const ArchRules* find_arch(const std::string& name);  // nullptr for an unknown arch
// A language model (token inputs, vocab_size classes, block_size samples); false for an unknown arch.
bool takes_tokens(const std::string& arch);

}  // namespace trainer::config
