// The pieces of the TensorBoard writer against published values (crc32c check value, protobuf
// varint examples). tests/python/test_tensorboard.py reads real files back with TensorBoard itself.
#include <catch2/catch.hpp>

#include <cstring>

#include "obs/tensorboard.hpp"
#include "test_util.hpp"

using namespace trainer::obs;

TEST_CASE("crc32c of the standard check string is 0xE3069283", "[unit]") {
  const char* s = "123456789";
  CHECK(crc32c(s, 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  // 32 zero bytes: the iSCSI test vector of RFC 3720
  std::string zeros(32, '\0');
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
}

TEST_CASE("protobuf varints: 1, 150 and 300", "[unit]") {
  std::string a, b, c;
  append_varint(a, 1);
  append_varint(b, 150);
  append_varint(c, 300);
  CHECK(a == std::string("\x01", 1));
  CHECK(b == std::string("\x96\x01", 2));  // the protobuf encoding guide's example
  CHECK(c == std::string("\xAC\x02", 2));
}

TEST_CASE("a TFRecord frame is length, masked crc of length, data, masked crc of data", "[unit]") {
  std::string data = "abc";
  std::string f = tfrecord_frame(data);
  REQUIRE(f.size() == 8 + 4 + 3 + 4);
  uint64_t len;
  std::memcpy(&len, f.data(), 8);
  CHECK(len == 3);
  uint32_t crc_len, crc_data;
  std::memcpy(&crc_len, f.data() + 8, 4);
  std::memcpy(&crc_data, f.data() + 15, 4);
  CHECK(crc_len == masked_crc32c(f.data(), 8));
  CHECK(f.substr(12, 3) == "abc");
  const uint32_t raw = crc32c("abc", 3);
  CHECK(crc_data == ((raw >> 15) | (raw << 17)) + 0xa282ead8u);
}

TEST_CASE("a scalar event encodes wall_time, step and one summary value", "[unit]") {
  std::string e = encode_scalars_event(1.5, 300, {{"a", 2.0}});
  std::string want;
  want += '\x09';  // field 1, fixed64
  double wt = 1.5;
  want.append(reinterpret_cast<const char*>(&wt), 8);
  want += std::string("\x10\xAC\x02", 3);  // field 2 varint 300
  // summary (field 5, len 10) { value (field 1, len 8) { tag (field 1) "a", simple_value (field 2, fixed32) 2.0f } }
  want += std::string("\x2a\x0a\x0a\x08\x0a\x01" "a" "\x15", 8);
  float v = 2.0f;
  want.append(reinterpret_cast<const char*>(&v), 4);
  CHECK(e == want);
}

TEST_CASE("the writer names its file events.out.tfevents.<time>.<host> and starts with the version", "[unit]") {
  auto dir = trainer::test::scratch_dir("tb_writer");
  std::string path;
  {
    TensorBoardWriter w(dir.string());
    w.add_scalars(1, {{"x", 1.0}});
    path = w.path();
  }
  auto name = std::filesystem::path(path).filename().string();
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  std::string bytes = trainer::test::read_file(path);
  CHECK(bytes.find("brain.Event:2") != std::string::npos);
  uint64_t len;
  std::memcpy(&len, bytes.data(), 8);
  CHECK(bytes.size() == (8 + 4 + len + 4) + (8 + 4 + encode_scalars_event(0, 1, {{"x", 1.0}}).size() + 4));
}
