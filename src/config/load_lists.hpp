// The collection-valued config keys (FieldType StringList, PrefixMap, GroupList): their YAML
// reading, kept apart from load.cpp's scalar keys. Internal to src/config (it names yaml-cpp).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "config/load.hpp"
#include "config/schema.hpp"

namespace trainer::config {

// Assigns `n` to the collection field `f` or adds diagnostics (each entry at its own line:col when the
// node has a position, else at `where`). Regex entries must pass NamePattern::problem
// (config/name_pattern.hpp: RE2 syntax, bounded length and nesting).
void assign_collection(const FieldInfo& f, const YAML::Node& n, const Location& where, const std::string& file,
                       std::vector<Diagnostic>& diags);

}  // namespace trainer::config
