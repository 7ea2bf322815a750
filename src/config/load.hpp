// Loading a RunConfig: YAML file + --set overrides -> validated struct, or every error at once.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace trainer::config {

struct Location {
  std::string file;  // config file, or "--set" for command-line overrides
  int line = 0;      // 1-based; 0 = unknown (a default, or an override)
  int col = 0;
  // the document it was written in, in the order applied (bases first, then the file; every --set after
  // them): of two keys set in different documents, the later one was written over the earlier
  int source = 0;
};

struct Diagnostic {
  Location where;
  std::string key;  // dotted key path ("" when the error is not about one key)
  std::string message;
  std::string str() const;  // "FILE:LINE:COL: key.path: message"
};

// A config error: every problem found, each with its location. Exit code 2.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<Diagnostic> diagnostics);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

struct LoadedConfig {
  RunConfig cfg;
  std::string source;                        // the config file ("" for text)
  std::vector<std::string> bases;            // the files it is composed on (`base:`), in the order applied
  std::map<std::string, Location> explicit_keys;  // keys the file or an override set, and where
  // what loading settled and the user should hear (train.max_steps over train.epochs, a clipped warmup):
  // the commands print or log them
  std::vector<Diagnostic> warnings;
  bool is_set(const std::string& key) const { return explicit_keys.count(key) > 0; }
  Location where(const std::string& key) const;
};

struct ValidateOptions {
  int64_t world_size = 1;
  bool cuda_available = false;
  // The command lays the world out as a device mesh (`trainer run`, `trainer check`): dist.tensor_parallel
  // must divide world_size. Commands that build the whole model on each rank (eval, predict) skip it.
  bool builds_mesh = false;
};

// Parse `path` and apply `overrides` ("a.b=value", value in YAML syntax). Relative paths in the file
// resolve against the file's folder, those in overrides against the working directory.
// A top-level `base: FILE` (or a list of files, relative to the file's folder) is applied first, each
// base with its own bases before it: maps merge deeply, the later file's scalars and lists win, the
// overrides come last, and every value keeps the location (file:line:col) where it was written.
// Throws ConfigError with every syntax, unknown-key, type and range error found.
LoadedConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Same from text; `name` stands for the file in messages, `base_dir` resolves relative paths.
LoadedConfig load_config_text(const std::string& text, const std::string& name,
                              const std::vector<std::string>& overrides = {},
                              const std::string& base_dir = ".");

// load_config + validate + resolve, reporting the errors of all three in one ConfigError.
LoadedConfig load_and_validate(const std::string& path, const std::vector<std::string>& overrides,
                               const ValidateOptions& opts);

// Cross-field checks (contradictions, arch vs data, batch arithmetic). Throws ConfigError.
void validate(const LoadedConfig& loaded, const ValidateOptions& opts);

// The training recipes' checks (label smoothing, EMA, mixup/cutmix, RandomResizedCrop, colour jitter,
// bits per byte of token data), called by validate(): each problem goes to err(key, message).
void validate_recipes(const LoadedConfig& loaded, const std::function<void(const std::string&, const std::string&)>& err);
// Keys of an option the config does not use (SGD's momentum under adamw, a data path for generated
// data), set where the choice that leaves them out was made or later (a base's SGD momentum under a
// config that picks adamw is the base's choice): each a warning in loaded.warnings, not an error (a
// sweep over optim.name=sgd,adamw sets momentum for its sgd points).
void note_unused_options(LoadedConfig& loaded);

// Bytes of text behind one token, for bits per byte: 1 for data.format text (byte-level), else
// data.bytes_per_token (0 = unknown: evaluations report no bpb).
double bytes_per_token(const DataConfig& data);

// The offset of the first byte of `s` that is not part of well-formed UTF-8, or nullopt.
std::optional<size_t> first_invalid_utf8(const std::string& s);
// `s` for a message: stray bytes and control characters written as \xNN, the rest as is.
std::string printable(const std::string& s);

// dist.pipeline_parallel's checks, called by validate(): the family has stages, the mesh fits the
// world, the schedule and virtual stages agree, the stage list covers every unit once, the
// microbatches divide the batch, and what pipeline runs do not support is refused.
void validate_pipeline(const LoadedConfig& loaded, const ValidateOptions& opts,
                       const std::function<void(const std::string&, const std::string&)>& err);

// dist.pipeline.microbatches, auto resolved: the largest divisor of train.batch_size up to
// 2 x P x virtual_stages (1 when the batch size is auto or P is 1).
int64_t pipeline_microbatches(const RunConfig& cfg);

// The ranks that read different data: world / (dist.tensor_parallel x dist.pipeline_parallel) (the
// tp and pp ranks of one data-parallel coordinate read the same batches), or world_size when that
// does not divide it (a command that builds no mesh).
int64_t data_parallel_size(const RunConfig& cfg, int64_t world_size);

// Fill derived values: grad_accum from global_batch_size, global_batch_size from the rest, over the
// data-parallel ranks of a world of world_size (data_parallel_size).
void resolve(RunConfig& cfg, int64_t world_size);

// The resolved config as YAML (every key, schema order); load_config_text(dump_yaml(c)) == c.
// Its first line is kDumpHeader: a file that starts with it is read as a dump, where a key written at
// its default value counts as not set (so the keys that do not apply to this run, which a dump writes
// too, are no "has no effect" errors) and any other key as set there.
inline constexpr const char* kDumpHeader = "# trainer: a resolved config, every key (run it again: trainer run FILE)\n";
std::string dump_yaml(const RunConfig& cfg);
// sha256 (hex) of dump_yaml(cfg): equal hashes mean equal configs.
std::string config_hash(const RunConfig& cfg);

}  // namespace trainer::config
