// TensorBoard event files written directly: TFRecord framing around hand-encoded Event protobufs.
// Only what scalars and the hparams dashboard need: Event{wall_time=1, step=2, file_version=3,
// summary=5}, Summary{value=1}, Summary.Value{tag=1, simple_value=2, metadata=9},
// SummaryMetadata{plugin_data=1{plugin_name=1, content=2}}, and the hparams plugin's
// HParamsPluginData{experiment=2, session_start_info=3, session_end_info=4} (field numbers from
// tensorboard/plugins/hparams/{plugin_data,api}.proto and google/protobuf/struct.proto's Value).
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

// One hyperparameter of a run, as the hparams dashboard shows it (a google.protobuf.Value).
struct HParam {
  enum class Kind { Number, Bool, String } kind = Kind::String;
  std::string name;
  double number = 0;
  bool flag = false;
  std::string text;
};

// The hparams dashboard's summaries, as torch.utils.tensorboard writes them: the experiment (the
// hparams and the metric tags, `metric_tags` e.g. "eval/loss", whose scalars the table shows) and
// this session's start with its values; then its end (status 1 = success, 2 = failure).
std::vector<std::string> encode_hparams_start_events(double wall_time, const std::vector<HParam>& hparams,
                                                    const std::vector<std::string>& metric_tags);
std::string encode_hparams_end_event(double wall_time, int status);

class TensorBoardWriter {
 public:
  // Creates <dir>/events.out.tfevents.<unix seconds>.<hostname> and writes the version record.
  // Throws std::runtime_error naming the file when it cannot be created.
  explicit TensorBoardWriter(const std::string& dir);
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  void add_hparams(const std::vector<HParam>& hparams, const std::vector<std::string>& metric_tags);
  void end_session(bool success);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace trainer::obs
