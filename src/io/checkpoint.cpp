#include "io/checkpoint.hpp"

#include "io/tensor_parts.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include "config/file_read.hpp"
#include "config/sha256.hpp"
#include "io/safetensors.hpp"

namespace trainer::io {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifestName = "manifest.json";
constexpr const char* kStateName = "state.json";
constexpr const char* kFormatName = "trainer-checkpoint";
constexpr int kFormatVersion = 1;

[[noreturn]] void fail(const fs::path& path, const std::string& what) {
  throw CheckpointError(path.string() + ": " + what);
}

// errno text of the failed call, captured before anything else can overwrite errno.
[[noreturn]] void fail_errno(const fs::path& path, const std::string& what) {
  const int err = errno;
  fail(path, what + ": " + std::strerror(err));
}

void fsync_path(const fs::path& path, bool directory) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) fail_errno(path, "cannot open for fsync");
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_errno(path, "cannot fsync");
  }
  ::close(fd);
}

// A new file with `data`, fsynced; errors name the file and errno (ENOSPC, EROFS, EIO, ...).
void write_file_synced(const fs::path& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno(path, "cannot create");
  size_t done = 0;
  while (done < data.size()) {
    ssize_t put = ::write(fd, data.data() + done, data.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      fail_errno(path, "cannot write");
    }
    done += static_cast<size_t>(put);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_errno(path, "cannot fsync");
  }
  if (::close(fd) != 0) fail_errno(path, "cannot close");
}

// Size limits on what is read whole into memory: a manifest lists a few files; the state document
// holds the resolved config and the loader's position. A FIFO or device is refused (RegularFile).
constexpr uint64_t kMaxManifestBytes = 16u << 20;
constexpr uint64_t kMaxStateBytes = 1u << 30;

std::string read_text(const fs::path& path, uint64_t max_bytes, const char* what) {
  return RegularFile::open<CheckpointError>(path.string(), max_bytes, what).read_all<CheckpointError>();
}

bool valid_group_name(const std::string& name) {
  if (name.empty() || name == "state" || name == "manifest") return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

// The manifest's own checksum covers every other key, so a flipped byte anywhere in it is caught
// even when the JSON still parses.
std::string manifest_self_hash(const nlohmann::json& manifest) {
  nlohmann::json body = manifest;
  body.erase("self_sha256");
  return sha256_hex(body.dump());
}

// Replaces `link` by a symlink to `target` (a sibling name) atomically: symlink + rename + fsync.
void replace_symlink(const fs::path& dir, const std::string& link, const std::string& target) {
  const fs::path tmp = dir / ("." + link + ".tmp-" + std::to_string(::getpid()));
  ::unlink(tmp.c_str());
  if (::symlink(target.c_str(), tmp.c_str()) != 0) fail_errno(tmp, "cannot create symlink");
  if (::rename(tmp.c_str(), (dir / link).c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    fail_errno(dir / link, "cannot replace");
  }
  fsync_path(dir, true);
}

std::optional<int64_t> read_step_link(const fs::path& link) {
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(link, ec))) return std::nullopt;
  fs::path target = fs::read_symlink(link, ec);
  if (ec) return std::nullopt;
  return parse_step_dir_name(target.filename().string());
}

// Every step-<N> folder under `dir`, newest first (complete or not).
std::vector<CheckpointInfo> step_dirs_newest_first(const fs::path& dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    auto step = parse_step_dir_name(it->path().filename().string());
    if (step && it->is_directory(ec) && !it->is_symlink(ec)) out.push_back({*step, it->path()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

ScanResult scan_newest(const fs::path& dir) {
  ScanResult r;
  for (const auto& c : step_dirs_newest_first(dir)) {
    try {
      verify_checkpoint(c.path);
      r.newest = c;
      break;
    } catch (const CheckpointError& e) {
      r.rejected.push_back(e.what());
    }
  }
  return r;
}

// Moves a folder out of the step-<N> namespace first, so a crash half way through a removal never
// leaves something that looks like a checkpoint; then deletes it.
void remove_checkpoint_dir(const fs::path& dir, const fs::path& victim) {
  const fs::path doomed = dir / (".deleting-" + victim.filename().string() + "-" + std::to_string(::getpid()));
  if (::rename(victim.c_str(), doomed.c_str()) != 0) fail_errno(victim, "cannot remove old checkpoint");
  std::error_code ec;
  fs::remove_all(doomed, ec);
  if (ec) fail(doomed, "cannot remove old checkpoint: " + ec.message());
}

// pid from ".step-12.tmp-<pid>", ".deleting-step-12-<pid>", a staged file ".step-12.<group>.staged-<pid>"
// or its own temporary while written ("....staged-<pid>.tmp.<pid>": io/safetensors' atomic write);
// 0 when the name is not ours.
pid_t owner_pid(std::string name) {
  const bool ours = name.rfind(".step-", 0) == 0 || name.rfind(".deleting-step-", 0) == 0 ||
                    name.rfind(".latest.tmp-", 0) == 0 || name.rfind(".best.tmp-", 0) == 0;
  if (!ours) return 0;
  if (const auto t = name.rfind(".tmp."); t != std::string::npos && name.find(".staged-") != std::string::npos)
    name.erase(t);  // the writer of the temporary is the stager whose pid precedes it
  auto dash = name.find_last_of('-');
  if (dash == std::string::npos || dash + 1 >= name.size()) return 0;
  const std::string digits = name.substr(dash + 1);
  if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 0;
  return static_cast<pid_t>(std::stol(digits));
}

// Everything after the JSON parse; nlohmann type errors are turned into CheckpointError by the caller.
void verify_files(const fs::path& dir, const fs::path& manifest_path, nlohmann::json& m) {
  std::error_code ec;
  if (!m.is_object() || m.value("format", "") != kFormatName || !m.contains("files") || !m["files"].is_object())
    fail(manifest_path, "not a trainer checkpoint manifest (format/files missing)");
  if (m.value("version", 0) != kFormatVersion)
    fail(manifest_path, "unsupported checkpoint format version " + m["version"].dump() + " (this build reads " +
                            std::to_string(kFormatVersion) + ")");
  const std::string self_expected = m.value("self_sha256", "");
  const std::string self_actual = manifest_self_hash(m);
  if (self_expected != self_actual)
    fail(manifest_path, "checksum mismatch: expected sha256 " + self_expected + ", actual " + self_actual);
  auto step = parse_step_dir_name(dir.filename().string());
  if (step && m.value("step", int64_t{-1}) != *step)
    fail(manifest_path, "manifest is for step " + m["step"].dump() + ", but the folder is " + dir.filename().string());
  if (!m["files"].contains(kStateName)) fail(manifest_path, "lists no state.json");

  for (const auto& [name, entry] : m["files"].items()) {
    if (name.find('/') != std::string::npos || name == "." || name == ".." || name == kManifestName)
      fail(manifest_path, "invalid file name '" + name + "'");
    const fs::path file = dir / name;
    if (!fs::is_regular_file(file, ec)) {
      struct stat st{};
      if (::stat(file.c_str(), &st) == 0)  // there, but a device, FIFO or folder (or a link to one)
        fail(file, "is " + file_kind(st.st_mode) + ", not the regular file manifest.json lists");
      fail(file, "missing (listed in manifest.json)");
    }
    const std::string expected = entry.value("sha256", "");
    const auto expected_size = entry.value("bytes", int64_t{-1});
    const auto actual_size = static_cast<int64_t>(fs::file_size(file, ec));
    std::string actual;
    try {
      actual = sha256_file_hex(file.string());
    } catch (const std::exception& e) {  // the message names the file
      throw CheckpointError(e.what());
    }
    if (actual != expected || actual_size != expected_size) {
      std::string msg = "checksum mismatch: expected sha256 " + expected + ", actual " + actual;
      if (actual_size != expected_size)
        msg += " (" + std::to_string(actual_size) + " bytes, expected " + std::to_string(expected_size) +
               (actual_size < expected_size ? ": truncated)" : ")");
      fail(file, msg);
    }
  }
}

}  // namespace

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) return std::nullopt;
  const std::string digits = name.substr(kPrefix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(digits);
}

std::string step_dir_name(int64_t step) { return "step-" + std::to_string(step); }

std::vector<CheckpointInfo> step_folders_newest_first(const fs::path& dir) { return step_dirs_newest_first(dir); }

void verify_checkpoint(const fs::path& dir) {
  const fs::path manifest_path = dir / kManifestName;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, "not a checkpoint folder (missing or not a folder)");
  if (!fs::exists(manifest_path, ec)) fail(dir, "incomplete checkpoint: no manifest.json");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_text(manifest_path, kMaxManifestBytes, "a checkpoint manifest"));
  } catch (const nlohmann::json::exception& e) {
    fail(manifest_path, std::string("invalid JSON (torn or corrupted manifest): ") + e.what());
  }
  try {
    verify_files(dir, manifest_path, m);
  } catch (const nlohmann::json::exception& e) {  // a key of the wrong type
    fail(manifest_path, std::string("malformed manifest: ") + e.what());
  }
}


CheckpointContent load_checkpoint(const fs::path& dir) {
  verify_checkpoint(dir);
  CheckpointContent c;
  const auto manifest = nlohmann::json::parse(read_text(dir / kManifestName, kMaxManifestBytes, "a checkpoint manifest"));
  std::map<std::string, SafetensorsFile> files;  // by group; the metadata of a group in parts says its ranges
  for (const auto& [name, entry] : manifest["files"].items()) {
    const fs::path file = dir / name;
    if (file.extension() != ".safetensors") continue;
    try {
      auto f = load_safetensors(file.string());
      c.groups[file.stem().string()] = f.tensors;
      files[file.stem().string()] = std::move(f);
    } catch (const SafetensorsError& e) {
      throw CheckpointError(e.what());
    }
  }
  try {
    c.state = nlohmann::json::parse(read_text(dir / kStateName, kMaxStateBytes, "a checkpoint state document"));
  } catch (const nlohmann::json::exception& e) {
    fail(dir / kStateName, std::string("invalid JSON: ") + e.what());
  }
  // every file of this save (a part or shard of another is refused), then a tensor-parallel run's parts
  assemble_checkpoint_parts(c, files, dir);
  for (auto& [group, f] : files) c.metadata[group] = std::move(f.metadata);  // the other files' (a part shard's layout)
  return c;
}

std::string checkpoint_folder_problem(const fs::path& path) {
  const auto c = check_folder(path.string());
  switch (c.kind) {
    case FolderCheck::Folder: return "";
    case FolderCheck::Missing: return "no such checkpoint or folder";
    case FolderCheck::DanglingLink: return "dangling link to " + c.detail + " (that checkpoint was deleted)";
    case FolderCheck::LinkLoop: return "a loop of symbolic links (" + c.detail + "), not a checkpoint folder";
    case FolderCheck::File: return "is a file, not a checkpoint folder";
    case FolderCheck::Other: return "is " + c.detail + ", not a checkpoint folder";
    default: return "cannot be read: " + c.detail;
  }
}

fs::path resolve_checkpoint_path(const fs::path& path) {
  std::error_code ec;
  if (const auto what = checkpoint_folder_problem(path); !what.empty()) fail(path, what);
  if (fs::exists(path / kManifestName, ec)) return fs::canonical(path, ec);
  if (parse_step_dir_name(fs::canonical(path, ec).filename().string()))
    fail(path, "incomplete checkpoint: no manifest.json");
  // a run directory: its checkpoints/ (eval and predict take one too)
  if (step_dirs_newest_first(path).empty() && fs::is_directory(path / "checkpoints", ec))
    return resolve_checkpoint_path(path / "checkpoints");
  auto scan = scan_newest(path);
  if (!scan.newest) {
    std::string msg = "no complete checkpoint (step-<N>/manifest.json) in this folder";
    for (const auto& r : scan.rejected) msg += "\n  rejected: " + r;
    fail(path, msg);
  }
  return scan.newest->path;
}

CheckpointStore::CheckpointStore(fs::path dir, CheckpointPolicy policy) : dir_(std::move(dir)), policy_(policy) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail(dir_, "cannot create checkpoint folder: " + ec.message());
  // a folder this process cannot write into (read-only mount, chattr +i: root passes access(2)) is
  // found now, not after checkpoint.max_failures saves failed; named like a save's temporary folder,
  // so that one left by a kill here is removed as such
  const fs::path probe = dir_ / (".step-0.tmp-" + std::to_string(::getpid()));
  if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST)
    fail(dir_, std::string("cannot write into the checkpoint folder: ") + std::strerror(errno));
  ::rmdir(probe.c_str());
  remove_interrupted_saves();
}

// Temporary folders and staged files of a process that no longer exists (killed mid-save) are
// garbage. A dead rank can still exist as a zombie for a moment, so this runs at start-up and again
// after every save (prune).
void CheckpointStore::remove_interrupted_saves() const {
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const pid_t pid = owner_pid(it->path().filename().string());
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code rm_ec;
      fs::remove_all(it->path(), rm_ec);
      if (!rm_ec) spdlog::info("removed {} (left by an interrupted save)", it->path().string());
    }
  }
}

fs::path staged_shard_path(const fs::path& dir, int64_t step, const std::string& group, int64_t pid) {
  return dir / ("." + step_dir_name(step) + "." + group + ".staged-" + std::to_string(pid < 0 ? ::getpid() : pid));
}

fs::path CheckpointStore::save(int64_t step, const CheckpointContent& content) {
  for (const auto& [name, tensors] : content.groups)
    if (!valid_group_name(name)) fail(dir_, "invalid tensor group name '" + name + "' (use [A-Za-z0-9_-])");
  const std::string final_name = step_dir_name(step);
  const fs::path final_dir = dir_ / final_name;
  const fs::path tmp = dir_ / ("." + final_name + ".tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    if (::mkdir(tmp.c_str(), 0755) != 0) fail_errno(tmp, "cannot create checkpoint folder");
    nlohmann::json files = nlohmann::json::object();
    auto record = [&](const std::string& name) {
      const fs::path file = tmp / name;
      fsync_path(file, false);
      files[name] = {{"sha256", sha256_file_hex(file.string())}, {"bytes", static_cast<int64_t>(fs::file_size(file))}};
    };
    for (const auto& [name, tensors] : content.groups) {
      try {
        std::map<std::string, std::string> meta = {{"checkpoint_group", name}, {"step", std::to_string(step)}};
        if (auto m = content.metadata.find(name); m != content.metadata.end()) meta.insert(m->second.begin(), m->second.end());
        save_safetensors((tmp / (name + ".safetensors")).string(), tensors, meta);
      } catch (const SafetensorsError& e) {
        throw CheckpointError(e.what());
      }
      record(name + ".safetensors");
    }
    for (const auto& [name, from] : content.staged) {
      if (!valid_group_name(name)) fail(dir_, "invalid tensor group name '" + name + "' (use [A-Za-z0-9_-])");
      const fs::path file = tmp / (name + ".safetensors");
      if (::rename(from.c_str(), file.c_str()) != 0) fail_errno(from, "cannot move the staged shard into " + tmp.string());
      record(name + ".safetensors");
    }
    write_file_synced(tmp / kStateName, content.state.dump(1));
    record(kStateName);
    if (content.before_manifest) content.before_manifest();
    nlohmann::json manifest = {{"format", kFormatName},
                               {"version", kFormatVersion},
                               {"step", step},
                               {"torch_version", TORCH_VERSION},
                               {"trainer_version", TRAINER_VERSION},
                               {"files", files}};
    manifest["self_sha256"] = manifest_self_hash(manifest);
    // written last: its presence is what makes the folder a complete checkpoint
    write_file_synced(tmp / kManifestName, manifest.dump(1));
    fsync_path(tmp, true);

    if (std::error_code e2; fs::exists(final_dir, e2) && !verifies({step, final_dir})) {
      // a folder of this step that does not verify (another run's, or damaged) is never deleted:
      // it moves aside for a person to look at
      const fs::path aside = dir_ / (final_name + ".rejected-" + std::to_string(::time(nullptr)));
      if (::rename(final_dir.c_str(), aside.c_str()) != 0) fail_errno(final_dir, "cannot move aside");
      spdlog::warn("{} does not verify; moved aside to {} (not deleted)", final_dir.string(), aside.string());
    }
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
      if (errno != ENOTEMPTY && errno != EEXIST) fail_errno(final_dir, "cannot rename " + tmp.string() + " into place");
      // Same step saved again (e.g. stopped right after a resume): swap atomically, so at every moment a
      // complete step-<N> exists, then delete the old one, now under the temporary name.
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
        fs::remove_all(tmp, ec);
      } else if (errno == EINVAL || errno == ENOSYS) {
        // no RENAME_EXCHANGE on this filesystem: move the old one aside first (a short window)
        remove_checkpoint_dir(dir_, final_dir);
        if (::rename(tmp.c_str(), final_dir.c_str()) != 0) fail_errno(final_dir, "cannot rename " + tmp.string() + " into place");
      } else {
        fail_errno(final_dir, "cannot replace the existing checkpoint");
      }
    }
    fsync_path(dir_, true);
  } catch (const CheckpointError&) {
    fs::remove_all(tmp, ec);
    throw;
  } catch (const std::exception& e) {  // filesystem_error, hashing: their messages name the file
    fs::remove_all(tmp, ec);
    throw CheckpointError(e.what());
  }
  // The checkpoint is complete and durable; what follows only tidies up, so it warns instead of failing.
  verified_.insert(step);
  rejected_.erase(step);
  try {
    replace_symlink(dir_, "latest", final_name);
  } catch (const CheckpointError& e) {
    spdlog::warn("checkpoint {} saved, but `latest` was not updated: {}", final_dir.string(), e.what());
  }
  prune(step);
  return final_dir;
}

void CheckpointStore::mark_best(int64_t step) {
  const std::string name = step_dir_name(step);
  std::error_code ec;
  if (!fs::exists(dir_ / name / kManifestName, ec)) fail(dir_ / name, "cannot mark as best: not a complete checkpoint");
  replace_symlink(dir_, "best", name);
}

std::optional<int64_t> CheckpointStore::best_step() const { return read_step_link(dir_ / "best"); }

ScanResult CheckpointStore::find_newest_complete() const { return scan_newest(dir_); }

std::vector<CheckpointInfo> CheckpointStore::list() const {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (auto& c : step_dirs_newest_first(dir_))
    if (fs::exists(c.path / kManifestName, ec)) out.push_back(c);
  std::reverse(out.begin(), out.end());
  return out;
}

bool CheckpointStore::verifies(const CheckpointInfo& c) {
  if (verified_.count(c.step)) return true;
  try {
    verify_checkpoint(c.path);
    verified_.insert(c.step);
    return true;
  } catch (const CheckpointError& e) {
    if (rejected_.insert(c.step).second)
      spdlog::warn("keeping {}: it does not verify, so it is never deleted automatically ({})", c.path.string(),
                   e.what());
    return false;
  }
}

void CheckpointStore::prune(int64_t newest_step) {
  remove_interrupted_saves();
  std::set<int64_t> keep = {newest_step};
  if (auto best = best_step()) keep.insert(*best);
  int64_t newest_kept = 0;
  std::vector<CheckpointInfo> candidates;
  auto all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->step > newest_step || !verifies(*it)) continue;
    if (newest_kept < policy_.keep_last) {
      keep.insert(it->step);
      ++newest_kept;
    }
    if (policy_.keep_every > 0 && it->step % policy_.keep_every == 0) keep.insert(it->step);
    candidates.push_back(*it);
  }
  for (const auto& c : candidates) {
    if (keep.count(c.step)) continue;
    try {
      remove_checkpoint_dir(dir_, c.path);
      verified_.erase(c.step);
    } catch (const CheckpointError& e) {
      spdlog::warn("{}", e.what());
    }
  }
}

}  // namespace trainer::io
