// Helpers for the checkpoint tests: sample content, byte surgery on files, small tmpfs mounts.
#pragma once

#include <sys/mount.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/checkpoint.hpp"

namespace trainer::test {

// A model-like group of `elements` floats plus an int64 buffer, and a small state document.
inline io::CheckpointContent sample_content(int64_t step, int64_t elements = 64) {
  torch::manual_seed(step);
  io::CheckpointContent c;
  c.groups["model"] = {{"fc.weight", torch::randn({elements})},
                       {"fc.bias", torch::randn({4})},
                       {"bn.num_batches_tracked", torch::tensor(step, torch::kInt64)}};
  c.groups["optimizer"] = {{"state.0.momentum_buffer", torch::randn({elements})}};
  c.state = {{"step", step}, {"epoch", 1}, {"samples_consumed", step * 32}, {"best_metric", 0.25}};
  return c;
}

inline void flip_byte(const std::filesystem::path& file, std::streamoff offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char b = 0;
  f.read(&b, 1);
  b ^= 0x01;
  f.seekp(offset);
  f.write(&b, 1);
}

inline nlohmann::json read_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

// A tmpfs of `size` mounted on `dir` for one test, unmounted on scope exit. mounted() is false when
// mounting is not permitted (an unprivileged container): the test then warns and skips.
class TmpfsMount {
 public:
  TmpfsMount(const std::filesystem::path& dir, const std::string& size) : dir_(dir) {
    std::filesystem::create_directories(dir);
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~TmpfsMount() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  bool remount_read_only() {
    return ::mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
  std::string error_;
};

}  // namespace trainer::test
