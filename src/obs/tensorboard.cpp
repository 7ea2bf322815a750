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

// A Summary.Value with no value, only plugin metadata (what the hparams plugin reads).
std::string plugin_value(const std::string& tag, const std::string& plugin, const std::string& content) {
  std::string plugin_data, metadata, value;
  append_bytes(plugin_data, 1, plugin);
  append_bytes(plugin_data, 2, content);
  append_bytes(metadata, 1, plugin_data);
  append_bytes(value, 1, tag);
  append_bytes(value, 9, metadata);
  return value;
}

std::string plugin_event(double wall_time, const std::string& tag, const std::string& content) {
  std::string summary, e = event_header(wall_time, 0);
  append_bytes(summary, 1, plugin_value(tag, "hparams", content));
  append_bytes(e, 5, summary);
  return e;
}

// google.protobuf.Value{number_value=2 | string_value=3 | bool_value=4}
std::string struct_value(const HParam& h) {
  std::string v;
  switch (h.kind) {
    case HParam::Kind::Number:
      append_key(v, 2, 1);
      append_fixed<double>(v, h.number);
      break;
    case HParam::Kind::Bool:
      append_key(v, 4, 0);
      append_varint(v, h.flag ? 1 : 0);
      break;
    case HParam::Kind::String: append_bytes(v, 3, h.text); break;
  }
  return v;
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

std::vector<std::string> encode_hparams_start_events(double wall_time, const std::vector<HParam>& hparams,
                                       const std::vector<std::string>& metric_tags) {
  // Experiment{hparam_infos=4{name=1, type=4}, metric_infos=5{name=1{tag=2}}}
  std::string experiment;
  for (const auto& h : hparams) {
    std::string info;
    append_bytes(info, 1, h.name);
    append_key(info, 4, 0);
    append_varint(info, h.kind == HParam::Kind::Number ? 3 : h.kind == HParam::Kind::Bool ? 2 : 1);  // DataType
    append_bytes(experiment, 4, info);
  }
  for (const auto& tag : metric_tags) {
    std::string name, info;
    append_bytes(name, 2, tag);
    append_bytes(info, 1, name);
    append_bytes(experiment, 5, info);
  }
  std::string exp_data;
  append_bytes(exp_data, 2, experiment);
  // SessionStartInfo{hparams=1 (map entries {key=1, value=2}), start_time_secs=5}
  std::string start;
  for (const auto& h : hparams) {
    std::string entry;
    append_bytes(entry, 1, h.name);
    append_bytes(entry, 2, struct_value(h));
    append_bytes(start, 1, entry);
  }
  append_key(start, 5, 1);
  append_fixed<double>(start, wall_time);
  std::string start_data;
  append_bytes(start_data, 3, start);
  return {plugin_event(wall_time, "_hparams_/experiment", exp_data),
          plugin_event(wall_time, "_hparams_/session_start_info", start_data)};
}

std::string encode_hparams_end_event(double wall_time, int status) {
  // SessionEndInfo{status=1, end_time_secs=2}
  std::string end, data;
  append_key(end, 1, 0);
  append_varint(end, static_cast<uint64_t>(status));
  append_key(end, 2, 1);
  append_fixed<double>(end, wall_time);
  append_bytes(data, 4, end);
  return plugin_event(wall_time, "_hparams_/session_end_info", data);
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

void TensorBoardWriter::add_hparams(const std::vector<HParam>& hparams, const std::vector<std::string>& metric_tags) {
  for (const auto& e : encode_hparams_start_events(now_s(), hparams, metric_tags)) write(e);
  flush();
}

void TensorBoardWriter::end_session(bool success) {
  write(encode_hparams_end_event(now_s(), success ? 1 : 2));
  flush();
}

void TensorBoardWriter::write(const std::string& event) { out_ << tfrecord_frame(event); }

void TensorBoardWriter::flush() { out_.flush(); }

}  // namespace trainer::obs
