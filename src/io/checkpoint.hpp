// Checkpoint storage: one folder per checkpoint, <dir>/step-<N>/, written so that a crash, a full
// disk or kill -9 at any moment leaves either the previous set of checkpoints or the new one, never a
// half-written folder that resume would trust.
//
//   <dir>/step-<N>/<group>.safetensors   named tensor groups (model, optimizer, rng, ...)
//   <dir>/step-<N>/state.json            the trainer's state document (step, loader position, config, ...)
//   <dir>/step-<N>/manifest.json         sha256 + size of every other file; written last = complete
//   <dir>/latest -> step-<N>             symlink, replaced atomically (a hint for people and export)
//   <dir>/best   -> step-<N>             symlink to the best evaluated checkpoint (kept by pruning)
//
// A save writes into <dir>/.step-<N>.tmp-<pid>/, fsyncs every file, renames the folder into place and
// fsyncs <dir>. Resume never trusts `latest`: it scans the step-* folders, newest first, and takes the
// first whose manifest is valid and whose every file matches its checksum.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trainer::io {

// Every message names the path it is about (and, for I/O failures, the errno text).
class CheckpointError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// What one checkpoint holds. The store does not interpret it: the trainer decides the groups and the
// state document's keys (see kStateConfigYaml for the one key export relies on).
struct CheckpointContent {
  std::map<std::string, NamedTensors> groups;  // "model" -> model.safetensors; names: [A-Za-z0-9_-]+
  nlohmann::json state = nlohmann::json::object();
  // Files other processes already wrote and synced (the ranks' shards of a sharded run), as
  // <group>.safetensors name -> where they are: save() renames them into the new folder (the same
  // file system) and lists them in the manifest like its own files. load_checkpoint() returns them
  // as groups.
  std::map<std::string, std::filesystem::path> staged;
  // Extra safetensors metadata per group (a tensor-parallel part's ranges, io/tensor_parts.hpp); as
  // loaded, every group's that is not assembled from parts.
  std::map<std::string, std::map<std::string, std::string>> metadata;
  // Called by CheckpointStore::save when every file but manifest.json is written (the moment a kill
  // leaves an incomplete folder): a fault-injection point for tests (TRAINER_INJECT_KILL save). Unset: nothing.
  std::function<void()> before_manifest;
};

// Where a rank stages its shard file for the checkpoint of `step` in `dir` before the saving rank
// moves it in: a dot-file named after the step and the writer's pid, so a store removes it once its
// writer is dead (like its own temporary folders); never taken for a checkpoint.
// `pid` < 0: this process's.
std::filesystem::path staged_shard_path(const std::filesystem::path& dir, int64_t step, const std::string& group,
                                        int64_t pid = -1);

// State-document keys shared with export (engine/commands/export.cpp): the resolved config as YAML text.
inline constexpr const char* kStateConfigYaml = "config_yaml";
inline constexpr const char* kStateConfigHash = "config_hash";
// image data: how the bytes became the model's input (engine/checkpoint/checkpointing.hpp)
inline constexpr const char* kStateDataNormalize = "data_normalize";
inline constexpr const char* kStateDataClasses = "data_classes";  // image_folder: the class names
// beside them where a name is not UTF-8 (data_classes then shows U+FFFD): every name's bytes in hex
inline constexpr const char* kStateDataClassesHex = "data_classes_hex";
// true on a checkpoint saved for a stop signal or a data change: an uninterrupted run has none
inline constexpr const char* kStateUnscheduled = "unscheduled";

struct CheckpointPolicy {
  int64_t keep_last = 3;   // newest complete checkpoints kept
  int64_t keep_every = 0;  // steps that are multiples of this are kept forever (0 = off)
};

struct CheckpointInfo {
  int64_t step = 0;
  std::filesystem::path path;
};

// The result of scanning a checkpoint folder for the newest checkpoint that verifies.
struct ScanResult {
  std::optional<CheckpointInfo> newest;  // empty when no checkpoint verifies
  std::vector<std::string> rejected;     // one message per newer folder that failed verification
};

// "step-<N>" -> N; nullopt for any other name (temporary folders, latest, best, stray files).
std::optional<int64_t> parse_step_dir_name(const std::string& name);
std::string step_dir_name(int64_t step);

// Every step-<N> folder under `dir`, newest first, complete or not (not verified).
std::vector<CheckpointInfo> step_folders_newest_first(const std::filesystem::path& dir);

// Checks manifest.json and every file it lists (size, then sha256) before anything is deserialised.
// Throws CheckpointError naming the file and, for a mismatch, the expected and actual hashes.
void verify_checkpoint(const std::filesystem::path& dir);

// verify_checkpoint, then reads every group and state.json.
CheckpointContent load_checkpoint(const std::filesystem::path& dir);

// The step-<N> folder a user-given path means: a checkpoint folder itself (or the `latest` / `best`
// symlink to one), or a checkpoints folder (or a run directory: its checkpoints/), meaning its newest
// complete checkpoint. Throws
// CheckpointError when the path is missing or holds no checkpoint. Does not verify checksums.
std::filesystem::path resolve_checkpoint_path(const std::filesystem::path& path);
// "" when `path` (links followed) is a folder; else what it is: "no such checkpoint or folder", "is a
// file, not a checkpoint folder", a dangling link, a loop of links, a device, ...
std::string checkpoint_folder_problem(const std::filesystem::path& path);

class CheckpointStore {
 public:
  // Creates `dir` if needed and removes temporary folders left by dead processes.
  explicit CheckpointStore(std::filesystem::path dir, CheckpointPolicy policy = {});

  const std::filesystem::path& dir() const { return dir_; }

  // Writes step-<step> atomically, points `latest` at it, then prunes. On any failure the temporary
  // folder is removed, nothing else changes, and CheckpointError gives the path and errno text.
  // A folder for the same step already there is swapped out atomically (renameat2 RENAME_EXCHANGE).
  std::filesystem::path save(int64_t step, const CheckpointContent& content);

  // Points `best` at step-<step> (which must exist); pruning keeps it.
  void mark_best(int64_t step);
  std::optional<int64_t> best_step() const;

  // Newest checkpoint that verifies; rejected newer folders are listed (the caller logs them).
  ScanResult find_newest_complete() const;

  // step-* folders with a manifest.json, oldest first (not verified).
  std::vector<CheckpointInfo> list() const;

  // Deletes what the policy does not keep, considering only steps <= newest_step: the newest keep_last
  // checkpoints that verify, multiples of keep_every, `best`, and newest_step itself stay. A folder
  // that does not verify is never deleted (nor counted): it is warned about once and left for a
  // person to look at. Folders of later steps (a run resumed from an older checkpoint) are left alone
  // until they fall under the policy.
  void prune(int64_t newest_step);

  // Tells the store that step-<step> verified (the run resumed from it), so pruning need not hash it.
  void mark_verified(int64_t step) { verified_.insert(step); }

 private:
  void remove_interrupted_saves() const;  // what dead processes' saves left behind
  bool verifies(const CheckpointInfo& c);  // cached: each folder is hashed at most once per store
  std::filesystem::path dir_;
  CheckpointPolicy policy_;
  std::set<int64_t> verified_, rejected_;
};

}  // namespace trainer::io
