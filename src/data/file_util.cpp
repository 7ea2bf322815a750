#include "data/file_util.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "config/file_read.hpp"
#include "data/dataset.hpp"

namespace trainer::data {

namespace {

namespace fs = std::filesystem;

// deflate cannot expand data by more than about 1032:1 (zlib's FAQ); a stream claiming more is a bomb.
constexpr uint64_t kMaxDeflateRatio = 1032;

bool is_gzip(const RegularFile& f) {
  uint8_t magic[2] = {0, 0};
  return f.size() >= 2 && f.read_at(magic, 2, 0).empty() && magic[0] == 0x1f && magic[1] == 0x8b;
}

struct GzReader {
  gzFile gz = nullptr;
  explicit GzReader(const RegularFile& f) {
    int fd = ::dup(f.fd());  // gzclose closes its descriptor; RegularFile keeps its own
    if (fd < 0) throw DataError(fmt::format("{}: cannot dup: {}", f.path(), std::strerror(errno)));
    gz = ::gzdopen(fd, "rb");
    if (!gz) {
      ::close(fd);
      throw DataError(f.path() + ": zlib init failed");
    }
    ::gzbuffer(gz, 1 << 20);
  }
  ~GzReader() {
    if (gz) ::gzclose(gz);
  }
  // Up to `n` more bytes appended to `out`; fewer only at the end of the data.
  void read(const std::string& path, std::vector<uint8_t>& out, uint64_t n) {
    while (n > 0) {
      const size_t at = out.size();
      const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n, 1u << 26));
      out.resize(at + chunk);
      const int got = ::gzread(gz, out.data() + at, chunk);
      int err = Z_OK;
      const char* msg = ::gzerror(gz, &err);
      if (got < 0 || (err != Z_OK && err != Z_STREAM_END)) {
        out.resize(at);
        throw DataError(fmt::format("{}: corrupt or truncated gzip data ({})", path, msg && *msg ? msg : "unexpected end"));
      }
      out.resize(at + static_cast<size_t>(got));
      if (static_cast<unsigned>(got) < chunk) return;  // end of the data
      n -= chunk;
    }
  }
};

}  // namespace

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : UINT64_MAX;
}

std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes, const std::string& why,
                                     FileStamp* stamp) {
  const RegularFile f = RegularFile::open<DataError>(path);
  if (stamp) *stamp = stamp_fd(f.fd());
  const uint64_t ram = physical_memory_bytes();
  std::string cap_why = why;
  if (ram < max_bytes) max_bytes = ram, cap_why = "this machine's physical memory";
  if (!is_gzip(f)) {
    if (f.size() > max_bytes)
      throw DataError(fmt::format("{}: {} bytes, more than {} ({})", path, f.size(), max_bytes, cap_why));
    std::vector<uint8_t> out(f.size());
    if (std::string err = f.read_at(out.data(), out.size(), 0); !err.empty()) throw DataError(path + ": " + err);
    return out;
  }
  uint64_t ratio_cap = UINT64_MAX;
  if (!__builtin_mul_overflow(f.size(), kMaxDeflateRatio, &ratio_cap) && ratio_cap < max_bytes)
    max_bytes = ratio_cap, cap_why = fmt::format("deflate's largest ratio {}:1 for {} compressed bytes",
                                                 kMaxDeflateRatio, f.size());
  GzReader gz(f);
  std::vector<uint8_t> out;
  out.reserve(std::min<uint64_t>(max_bytes, f.size() * 4 + 1024));
  gz.read(path, out, max_bytes);
  std::vector<uint8_t> probe;
  gz.read(path, probe, 1);  // one byte past the cap means the data is larger than allowed
  if (!probe.empty())
    throw DataError(fmt::format("{}: the gzip data inflates to more than {} bytes ({})", path, max_bytes, cap_why));
  return out;
}

std::vector<uint8_t> read_file_prefix(const std::string& path, uint64_t n) {
  const RegularFile f = RegularFile::open<DataError>(path);
  std::vector<uint8_t> out;
  if (!is_gzip(f)) {
    out.resize(std::min(n, f.size()));
    if (std::string err = f.read_at(out.data(), out.size(), 0); !err.empty()) throw DataError(path + ": " + err);
    return out;
  }
  GzReader gz(f);
  gz.read(path, out, n);
  return out;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const RegularFile f = RegularFile::open<DataError>(path);  // never a FIFO, device or folder
  size_ = static_cast<int64_t>(f.size());
  stamp_ = stamp_fd(f.fd());
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, f.fd(), 0);
    if (p == MAP_FAILED) throw DataError(fmt::format("{}: cannot map: {}", path, std::strerror(errno)));
    data_ = static_cast<const uint8_t*>(p);
  }
}  // the mapping keeps the file alive after the descriptor closes

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), stamp_(o.stamp_), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

void MappedFile::throw_faulted() const {
  std::string what = change();
  throw DataChanged(path_, what.empty() ? "a read of its memory map failed (the file was truncated, then restored?)" : what);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

FolderListing list_folder_files(const std::string& folder) {
  FolderListing out;
  std::map<std::pair<dev_t, ino_t>, fs::path> seen;  // folders listed, by identity: links may name one twice
  std::vector<std::pair<fs::path, std::vector<fs::path>>> pending{{fs::path(folder), {}}};  // and the folders above
  while (!pending.empty()) {
    const auto [dir, above] = std::move(pending.back());
    pending.pop_back();
    struct stat st{};
    if (::stat(dir.c_str(), &st) != 0) continue;
    const auto [first, added] = seen.emplace(std::make_pair(st.st_dev, st.st_ino), dir);
    if (!added) {  // a link to a folder above it is a loop: its listing would never end (torchvision's)
      if (std::find(above.begin(), above.end(), first->second) == above.end())
        out.repeated.emplace_back(dir.string(), first->second.string());
      continue;
    }
    auto below = above;
    below.push_back(dir);
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const fs::path& p = it->path();
      std::error_code kind_ec;
      auto status = it->symlink_status(kind_ec);  // the listing's own type: no stat per file
      const bool link = !kind_ec && fs::is_symlink(status);
      if (link) status = fs::status(p, kind_ec);  // through the link
      if (kind_ec || status.type() == fs::file_type::not_found) {
        std::string why = kind_ec ? kind_ec.message() : "No such file or directory";
        std::error_code link_ec;
        if (link) why = "a symbolic link to " + fs::read_symlink(p, link_ec).string() + ": " + why;
        out.unreadable.emplace_back(p.string(), why);
      } else if (fs::is_directory(status)) {
        pending.emplace_back(p, below);
      } else if (fs::is_regular_file(status)) {
        out.files.push_back(p.string());
      } else {  // a FIFO, socket or device (or a link to one): named by the caller if it has an image's name
        const char* kind = fs::is_fifo(status) ? "a FIFO (named pipe)" : fs::is_socket(status) ? "a socket" : "a device";
        out.unreadable.emplace_back(p.string(), std::string(link ? "a symbolic link to " : "") + kind +
                                                    ", not a regular file");
      }
    }
    if (ec) {
      if (dir == fs::path(folder))
        throw DataError(fmt::format("{}: cannot list the folder: {}", folder, ec.message()));
      out.unlisted.emplace_back(dir.string(), ec.message());
    }
  }
  std::sort(out.files.begin(), out.files.end());
  std::sort(out.unreadable.begin(), out.unreadable.end());
  std::sort(out.unlisted.begin(), out.unlisted.end());
  return out;
}

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;  // glob() sorts its matches
}

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}
uint32_t read_le32(const uint8_t* p) {
  return (uint32_t(p[3]) << 24) | (uint32_t(p[2]) << 16) | (uint32_t(p[1]) << 8) | uint32_t(p[0]);
}

}  // namespace trainer::data
