#include "obs/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace trainer::obs {
namespace {

constexpr uint32_t kCrc32cPoly = 0x82F63B78u;  // reflected Castagnoli polynomial
constexpr uint32_t kMaskDelta = 0xa282ead8u;

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCrc32cPoly : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// protobuf wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
void append_key(std::string& out, uint32_t field, uint32_t wire) { append_varint(out, (field << 3) | wire); }

template <class T>
void append_fixed(std::string& out, T v) {  // little-endian, as x86/ARM store it
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void append_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  append_key(out, field, 2);
  append_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  append_key(e, 1, 1);
  append_fixed<double>(e, wall_time);
  append_key(e, 2, 0);
  append_varint(e, static_cast<uint64_t>(step));
  return e;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  const auto& t = crc_table();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + kMaskDelta;
}

void append_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

std::string tfrecord_frame(const std::string& data) {
  std::string r;
  append_fixed<uint64_t>(r, data.size());
  append_fixed<uint32_t>(r, masked_crc32c(r.data(), 8));
  r += data;
  append_fixed<uint32_t>(r, masked_crc32c(data.data(), data.size()));
  return r;
}

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string e = event_header(wall_time, 0);
  append_bytes(e, 3, version);
  return e;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    append_bytes(v, 1, tag);
    append_key(v, 2, 5);
    append_fixed<float>(v, static_cast<float>(value));
    append_bytes(summary, 1, v);
  }
  std::string e = event_header(wall_time, step);
  append_bytes(e, 5, summary);
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = (std::filesystem::path(dir) /
           ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_s())) + "." + host))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("cannot create TensorBoard event file " + path_ + ": " + std::strerror(errno));
  write(encode_file_version_event(now_s(), "brain.Event:2"));
  flush();
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  write(encode_scalars_event(now_s(), step, scalars));
}

void TensorBoardWriter::write(const std::string& event) { out_ << tfrecord_frame(event); }

void TensorBoardWriter::flush() { out_.flush(); }

}  // namespace trainer::obs
