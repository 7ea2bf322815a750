#include "config/sha256.hpp"

#include <algorithm>

#include "config/file_read.hpp"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace trainer {
namespace {

struct Sha256 {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  Sha256() {
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("sha256: OpenSSL digest init failed");
  }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx.get(), p, n); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx.get(), md, &len);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) {
      out += digits[md[i] >> 4];
      out += digits[md[i] & 15];
    }
    return out;
  }
};

}  // namespace

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex();
}

std::string sha256_file_hex(const std::string& path) {
  const RegularFile f = RegularFile::open<std::runtime_error>(path);  // never a FIFO or device
  Sha256 h;
  std::vector<char> buf(1 << 20);
  for (uint64_t done = 0; done < f.size();) {
    const uint64_t n = std::min<uint64_t>(buf.size(), f.size() - done);
    if (std::string why = f.read_at(buf.data(), n, done); !why.empty()) throw std::runtime_error(path + ": " + why);
    h.update(buf.data(), n);
    done += n;
  }
  return h.hex();
}

}  // namespace trainer
