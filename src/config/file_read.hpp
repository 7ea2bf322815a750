// Opening user-named files for reading, the one way every library does it. It lives in src/config
// because that is the base layer every library links (config, io, data, models, engine all read
// files a user named: the config, data files, init_from, checkpoints).
//
// A path a user gives may name anything: a FIFO (open() blocks until a writer comes, forever), a
// device such as /dev/zero (read() never ends), a folder. RegularFile opens with O_NONBLOCK, so
// opening a FIFO returns at once, then fstat()s the descriptor and refuses anything that is not a
// regular file. The descriptor is switched back to blocking reads afterwards (a regular file never
// blocks anyway). A size limit refuses files too large for what they claim to be (metadata).
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace trainer {

inline constexpr uint64_t kNoSizeLimit = std::numeric_limits<uint64_t>::max();

// Default error type; each library may ask for its own (DataError, CheckpointError, ...), which must
// be constructible from a std::string. Messages always start with "PATH: ".
class FileReadError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RegularFile {
 public:
  // Opens `path` read-only; throws Error("PATH: why") when it cannot be opened, is not a regular
  // file (FIFO, socket, device, folder), or is larger than `max_bytes` (`what` names the kind of
  // file in that message, e.g. "a checkpoint manifest").
  template <class Error = FileReadError>
  static RegularFile open(const std::string& path, uint64_t max_bytes = kNoSizeLimit, const char* what = "the file") {
    RegularFile f;
    std::string why = f.open_impl(path, max_bytes, what);
    if (!why.empty()) throw Error(path + ": " + why);
    return f;
  }
  // The whole file (bounded by the open-time limit). Throws Error("PATH: why") on a read failure or
  // when the file changed size while it was read.
  template <class Error = FileReadError>
  std::string read_all() const {
    std::string out;
    std::string why = read_all_impl(out);
    if (!why.empty()) throw Error(path_ + ": " + why);
    return out;
  }
  // Exactly `n` bytes at `offset` into `dst`; "" on success, else why not.
  std::string read_at(void* dst, uint64_t n, uint64_t offset) const;

  RegularFile() = default;
  ~RegularFile();
  RegularFile(RegularFile&& o) noexcept;
  RegularFile& operator=(RegularFile&& o) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string open_impl(const std::string& path, uint64_t max_bytes, const char* what);
  std::string read_all_impl(std::string& out) const;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

// "a FIFO (named pipe)", "a folder", "a character device", ... for the st_mode of a non-regular file.
std::string file_kind(unsigned mode);

// What a path that should be a folder is, links followed: Folder, or why not (for messages).
struct FolderCheck {
  enum Kind { Folder, Missing, DanglingLink, LinkLoop, File, Other, Unreadable } kind = Folder;
  std::string detail;  // DanglingLink: the link's target; Other: file_kind(); Unreadable: strerror
};
FolderCheck check_folder(const std::string& path);

// "12.0 MiB": for limit messages.
std::string human_bytes(uint64_t n);

}  // namespace trainer
