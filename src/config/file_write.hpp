// Checking a file a command is told to write (`export --out`, `report --out`, `eval --output`,
// `predict --output`) before anything is read or written. The companion of file_read.hpp, in
// src/config for the same reason: every command's library links it.
//
// A user-named output may name anything. A device or a FIFO is no place for results: an atomic
// write (a temporary renamed over the target) would replace /dev/null itself when run as root, and
// opening a FIFO blocks until a reader comes, where no stop signal reaches. A path that is one of the
// command's own inputs would be emptied before it is read, and a run directory's records, config and
// checkpoints are what was saved: none of them is overwritten.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace trainer {

// Throws std::invalid_argument("FLAG PATH: why") when `path` exists and is not a regular file (a
// folder, a device, a FIFO, a socket), when it is the same file (device and inode) as one of `inputs`
// (those that do not exist are ignored), or inside one of `data_folders` (the folders of data the
// command reads: predict's --input folders, eval's data), or when it is one of a run directory's own
// files: under
// its checkpoints/ or logs/ folder, or its metrics.jsonl, config.yaml, config.sha256, autotune.json,
// init_report.json or .lock, or in a checkpoint.dir folder (a run directory: a folder holding .lock and
// config.yaml; a checkpoint.dir elsewhere holds .lock alone). A path that does not
// exist yet passes (its folders may be made by the writer).
void check_output_file(const char* flag, const std::filesystem::path& path,
                       const std::vector<std::filesystem::path>& inputs = {},
                       const std::vector<std::filesystem::path>& data_folders = {});

// Whether `path` (which need not exist) lies inside `folder`, an existing folder, both resolved
// (symbolic links, "..") as the file system sees them.
bool is_inside_folder(const std::filesystem::path& path, const std::filesystem::path& folder);

// Writes `text` to `path` atomically: a temporary file in the same folder (temporary_for), fsync,
// rename, fsync the folder. A failure throws std::runtime_error naming the file and errno's text, and
// leaves `path` as it was.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

// The temporary file an atomic write of `path` goes through: PATH.tmp.HOST.PID, in the same folder.
// Before naming it, removes the temporaries of `path` that writers on this host left when they were
// killed (SIGKILL, a power cut: an export of a large model left gigabytes), i.e. those whose process
// no longer exists. Another host's (a shared file system) are left alone.
std::filesystem::path temporary_for(const std::filesystem::path& path);

}  // namespace trainer
