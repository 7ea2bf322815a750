// Data files that change under a running job (docs/RELIABILITY.md, "Data that changes"). On a shared
// file system a dataset may be rewritten by another job while a run trains on it: truncated,
// deleted, replaced by a new file of the same name, or overwritten in place.
//  - Every file a dataset holds is stamped when it is opened (device, inode, size, mtime); the
//    loader compares the stamps at each epoch boundary, and a reader compares them when a read
//    fails, so a change is reported as DataChanged naming the file and what changed.
//  - Memory-mapped files are read through a guarded copy: a page fault on a mapping whose file was
//    truncated (SIGBUS) returns false from the copy in the faulting thread instead of killing the
//    process. A SIGBUS outside a guarded copy keeps its old meaning (the previous handler, or the
//    default action).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace trainer::data {

struct FileStamp {
  uint64_t dev = 0, ino = 0;
  int64_t size = -1;  // -1: no stamp (nothing to compare)
  int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

// The stamp of an open descriptor (fstat) or of a path (stat; size -1 when it cannot be stat'ed).
FileStamp stamp_fd(int fd);
FileStamp stamp_path(const std::string& path);

// "" while `path` is still the file stamped as `then`; otherwise what happened to it: "it was
// deleted", "it was replaced by another file", "it was truncated from A to B bytes", "it grew
// from A to B bytes", "it was modified (its mtime changed)".
std::string describe_change(const std::string& path, const FileStamp& then);

// Runs fn(ctx) in this thread with a SIGBUS at an address in [lo, hi) (a read of a mapping past
// the end of its truncated file) turned into a `false` return. fn must not throw and must own no
// object with a destructor while it reads: the fault leaves its frames without unwinding them.
bool guarded_run(void (*fn)(void*), void* ctx, const void* lo, const void* hi);

// memcpy from a memory map through guarded_run: false when the source faulted.
bool guarded_copy(void* dst, const void* src, size_t n);

}  // namespace trainer::data
