// Reading data files: whole files (gzip or raw, told apart by the gzip magic), read-only memory
// maps for large token shards, glob expansion. Errors are DataErrors naming the path.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/file_watch.hpp"

namespace trainer::data {

// The file's bytes, gunzipped when it starts with the gzip magic (1f 8b). Only regular files are
// read (config/file_read.hpp). The result is capped before it is allocated: at `max_bytes` (what a
// header promises; `why` says so in the error), at this machine's physical memory, and, for gzip,
// at deflate's largest possible ratio (1032:1) times the compressed size, so a gzip bomb stops
// with a DataError naming the file instead of exhausting memory.
// `stamp`, when given, receives the stamp of the file read (data/file_watch.hpp).
std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes = UINT64_MAX,
                                     const std::string& why = "", FileStamp* stamp = nullptr);

// The first `n` bytes of the file (gunzipped as above), or all of it when it is shorter: headers.
std::vector<uint8_t> read_file_prefix(const std::string& path, uint64_t n);

// Physical memory of this machine in bytes: the cap on data held in memory.
uint64_t physical_memory_bytes();

// A read-only memory map of a whole regular file. Move-only; unmaps on destruction. Reads go
// through copy() or guarded(): a page the file no longer has (truncated under the run) is a
// DataChanged naming the file, not a SIGBUS (data/file_watch.hpp).
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile& operator=(MappedFile&&) = delete;
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // "" while the file is the one mapped, else what happened to it (describe_change).
  std::string change() const { return describe_change(path_, stamp_); }
  // `n` bytes at `offset` (within size()) into `dst`; throws DataChanged when the read faults.
  void copy(void* dst, int64_t offset, int64_t n) const {
    if (!guarded_copy(dst, data_ + offset, static_cast<size_t>(n))) throw_faulted();
  }
  // Runs `f()`, which reads the mapping, with faults turned into DataChanged. `f` must not throw
  // and must own nothing with a destructor (guarded_run).
  template <class F>
  void guarded(F& f) const {
    if (!guarded_run([](void* ctx) { (*static_cast<F*>(ctx))(); }, &f, data_, data_ + size_)) throw_faulted();
  }

 private:
  [[noreturn]] void throw_faulted() const;
  std::string path_;
  FileStamp stamp_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

// The files under a folder, as torchvision's ImageFolder walks it (os.walk, followlinks=True): links
// to folders are followed, but each folder is listed once (a link back to an ancestor is no endless
// walk). `files`: the regular files (a link to one counts), sorted. `unreadable`: the entries whose
// kind cannot be read (a link to nothing, a loop of links, no permission), each with the reason,
// sorted; the caller decides whether its name mattered. `unlisted`: sub-folders that could not be
// listed, with the reason (their files are unknown). Throws DataError naming `folder` when it cannot
// be listed itself.
struct FolderListing {
  std::vector<std::string> files;
  std::vector<std::pair<std::string, std::string>> unreadable;  // path, reason
  std::vector<std::pair<std::string, std::string>> unlisted;    // path, reason
  // a folder reached again through a link, not inside itself (path, the path it was listed under):
  // listed once (torchvision's ImageFolder lists it once per link); a loop of links is not counted
  std::vector<std::pair<std::string, std::string>> repeated;
};
FolderListing list_folder_files(const std::string& folder);

// Sorted matches of a glob pattern (a plain path matches itself if it exists).
std::vector<std::string> expand_glob(const std::string& pattern);

uint32_t read_be32(const uint8_t* p);
uint32_t read_le32(const uint8_t* p);

}  // namespace trainer::data
