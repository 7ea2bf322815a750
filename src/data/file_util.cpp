#include "data/file_util.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "data/dataset.hpp"

namespace trainer::data {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (raw.size() < 2 || raw[0] != 0x1f || raw[1] != 0x8b) return raw;
  // gzip: inflate in one stream (windowBits 15 + 32 = auto-detect the gzip header)
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) throw DataError(path + ": zlib init failed");
  std::vector<uint8_t> out(raw.size() * 4 + 1024);
  zs.next_in = raw.data();
  zs.avail_in = static_cast<uInt>(raw.size());
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (zs.total_out == out.size()) out.resize(out.size() * 2);
    zs.next_out = out.data() + zs.total_out;
    zs.avail_out = static_cast<uInt>(out.size() - zs.total_out);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) rc = Z_DATA_ERROR;  // input ended inside the stream
    if (rc != Z_OK && rc != Z_STREAM_END) {
      inflateEnd(&zs);
      throw DataError(fmt::format("{}: corrupt or truncated gzip data ({})", path, zs.msg ? zs.msg : "unexpected end"));
    }
  }
  out.resize(zs.total_out);
  inflateEnd(&zs);
  return out;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw DataError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw DataError(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
  }
  size_ = st.st_size;
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw DataError(fmt::format("{}: cannot map: {}", path, std::strerror(errno)));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::MappedFile(MappedFile&& o) noexcept : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
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
