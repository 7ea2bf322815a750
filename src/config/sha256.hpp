// SHA-256 (OpenSSL's libcrypto) as lowercase hex, for config hashes and checkpoint manifests.
#pragma once

#include <string>
#include <string_view>

namespace trainer {

std::string sha256_hex(std::string_view data);
// Hash of a file's whole content; throws std::runtime_error naming the file when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace trainer
