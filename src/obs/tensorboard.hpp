// TensorBoard event files written directly: TFRecord framing around hand-encoded Event protobufs.
// Only what scalars need: Event{wall_time=1, step=2, file_version=3, summary=5},
// Summary{value=1}, Summary.Value{tag=1, simple_value=2}.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace trainer::obs {

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);  // Castagnoli, as TFRecord uses
uint32_t masked_crc32c(const void* data, size_t n);             // TFRecord's rotated + offset form
void append_varint(std::string& out, uint64_t v);               // protobuf base-128 varint

// One framed record: length (u64 LE), masked crc of the length, data, masked crc of the data.
std::string tfrecord_frame(const std::string& data);

// Serialized Event protobufs.
std::string encode_file_version_event(double wall_time, const std::string& version);
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, double>>& scalars);

class TensorBoardWriter {
 public:
  // Creates <dir>/events.out.tfevents.<unix seconds>.<hostname> and writes the version record.
  // Throws std::runtime_error naming the file when it cannot be created.
  explicit TensorBoardWriter(const std::string& dir);
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace trainer::obs
