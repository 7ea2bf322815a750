#include "config/file_write.hpp"

#include <sys/stat.h>

#include <array>
#include <stdexcept>
#include <string>
#include <system_error>

#include "config/file_read.hpp"

namespace trainer {
namespace fs = std::filesystem;
namespace {

// The run directory's files that hold what a run saved, by their name in the run directory.
constexpr std::array<const char*, 6> kRunFiles = {"metrics.jsonl", "config.yaml",      "config.sha256",
                                                  "autotune.json", "init_report.json", ".lock"};

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}
// a run directory and a checkpoint.dir elsewhere both hold a lock file; only the run directory its config
bool is_run_dir(const fs::path& d) { return path_exists(d / ".lock") && path_exists(d / "config.yaml"); }
bool is_checkpoint_dir(const fs::path& d) { return path_exists(d / ".lock") && !path_exists(d / "config.yaml"); }

// "" or why `abs` (absolute, its links resolved as far as it exists) is a saved file of a run directory
std::string run_file_reason(const fs::path& abs) {
  const fs::path dir = abs.parent_path();
  if (is_run_dir(dir))
    for (const char* name : kRunFiles)
      if (abs.filename() == name) return "is the run directory " + dir.string() + "'s " + name;
  for (fs::path d = dir, below; d.has_relative_path(); below = d.filename(), d = d.parent_path()) {
    if (is_checkpoint_dir(d)) return "lies in the checkpoint folder " + d.string();
    if (d != dir && is_run_dir(d) && (below == "checkpoints" || below == "logs"))
      return "lies in the run directory " + d.string() + "'s " + below.string() + " folder";
  }
  return "";
}

}  // namespace

void check_output_file(const char* flag, const fs::path& path, const std::vector<fs::path>& inputs) {
  auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(std::string(flag) + " " + path.string() + ": " + why);
  };
  struct stat out {};
  const bool exists = ::stat(path.c_str(), &out) == 0;
  if (exists && S_ISDIR(out.st_mode)) refuse("is a folder; name the file to write in it");
  if (exists && !S_ISREG(out.st_mode)) refuse("is " + file_kind(out.st_mode) + ", not a regular file; name a file to write");
  if (exists)
    for (const auto& in : inputs) {
      struct stat st {};
      if (::stat(in.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino)
        refuse("is also this command's input " + in.string() + "; write the output elsewhere");
    }
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return;  // the writer names what is wrong with the path
  if (const auto why = run_file_reason(abs); !why.empty())
    refuse(why + " (what the run saved is not overwritten); write the output elsewhere");
}

}  // namespace trainer
