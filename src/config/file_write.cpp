#include "config/file_write.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include "config/file_read.hpp"

namespace trainer {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const fs::path& p, const std::string& what, int err) {
  throw std::runtime_error(p.string() + ": " + what + ": " + std::strerror(err));
}

void fsync_path(const fs::path& p, int flags) {
  int fd = ::open(p.c_str(), flags);
  if (fd < 0) fail(p, "cannot open for fsync", errno);
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    fail(p, "fsync failed", e);
  }
  ::close(fd);
}

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

void check_output_file(const char* flag, const fs::path& path, const std::vector<fs::path>& inputs,
                       const std::vector<fs::path>& data_folders) {
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
  for (const auto& in : data_folders)  // predict --input folders, the data eval reads
    if (is_inside_folder(abs, in))
      refuse("is inside this command's input folder " + in.string() + " (it would replace or add to what is read "
             "there); write the output elsewhere");
}

bool is_inside_folder(const fs::path& path, const fs::path& folder) {
  struct stat st {};
  if (folder.empty() || ::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return false;
  const fs::path f = fs::weakly_canonical(fs::absolute(folder, ec), ec);
  const auto rel = p.lexically_relative(f);
  return !ec && !rel.empty() && *rel.begin() != "..";
}

fs::path temporary_for(const fs::path& path) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  for (char& c : host)
    if (c == '/') c = '_';
  const std::string prefix = path.filename().string() + ".tmp." + host + ".";
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (::kill(static_cast<pid_t>(std::stol(pid)), 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      fs::remove(it->path(), rm);
    }
  }
  fs::path tmp = path;
  tmp += ".tmp." + std::string(host) + "." + std::to_string(::getpid());
  return tmp;
}

void write_file_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = temporary_for(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "cannot create", errno);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(tmp, "write failed", e);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail(tmp, "fsync/close failed", e);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail(path, "rename failed", e);
  }
  fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path(), O_RDONLY | O_DIRECTORY);
}

}  // namespace trainer
