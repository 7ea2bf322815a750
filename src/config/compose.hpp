// Config composition: a file may name other files under a top-level `base:` (one name or a list,
// relative to the file's folder). The documents are applied in order, bases first (depth first, in
// list order), the file itself last: since each document assigns the keys it writes over what came
// before, maps merge deeply and scalars and lists are replaced by the later file. Private to
// src/config (it exposes yaml-cpp types): load.cpp is its only user.
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>
#include <vector>

#include "config/load.hpp"

namespace trainer::config {

// The top-level key that names the bases; the Loader skips it.
inline constexpr const char* kBaseKey = "base";

struct ConfigDocument {
  YAML::Node root;             // the file's only document (null when empty)
  std::string file;            // its name in messages (a base: relative to where the chain started)
  std::filesystem::path dir;   // relative paths in it resolve against this folder
  std::string chain;           // "a.yaml -> b.yaml" for a base; "" for the file that was asked for
};

// Reads a config file as text: a missing file, a folder, a FIFO or a file over 16 MiB is a
// ConfigError naming it. `dir` receives the file's absolute folder.
std::string read_config_file(const std::string& path, std::filesystem::path& dir);

// `text` (the file `name`, in folder `dir`) and every base it names, as the documents to apply in
// order. Problems (syntax, a second document, a base that is missing, not a string, or a cycle) go to
// `diags` with the file, line and column where they were written; `parsed` turns false when some
// document could not be read, so cross-field checks of a half-read config are not attempted.
std::vector<ConfigDocument> compose_documents(const std::string& text, const std::string& name,
                                              const std::filesystem::path& dir, std::vector<Diagnostic>& diags,
                                              bool& parsed);

}  // namespace trainer::config
