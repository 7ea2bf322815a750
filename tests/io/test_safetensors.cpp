// Safetensors: round trips, the on-disk layout, and one test per malformed header.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstring>

#include "io/safetensors.hpp"
#include "io/weight_copy.hpp"
#include "test_util.hpp"

using trainer::io::SafetensorsError;
namespace fs = std::filesystem;

namespace {

// A file made by hand: 8-byte length, the header text, then `data_bytes` bytes of data.
std::string craft(const std::string& name, const std::string& header, size_t data_bytes, uint64_t declared = 0) {
  auto dir = trainer::test::scratch_dir("safetensors_" + name);
  const auto path = (dir / "bad.safetensors").string();
  uint64_t n = declared ? declared : header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  bytes.append(data_bytes, '\x01');
  trainer::test::write_file(path, bytes);
  return path;
}

std::string load_error(const std::string& path) {
  try {
    trainer::io::load_safetensors(path);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("safetensors round trip keeps every dtype, shape, value and the metadata", "[unit]") {
  auto dir = trainer::test::scratch_dir("safetensors_roundtrip");
  const auto path = (dir / "t.safetensors").string();
  std::vector<std::pair<std::string, torch::Tensor>> in = {
      {"u8", torch::arange(5, torch::kUInt8)},
      {"f64", torch::randn({2, 3}, torch::kFloat64)},
      {"f32", torch::randn({4, 1, 2})},
      {"f16", torch::randn({3}).to(torch::kFloat16)},
      {"bf16", torch::randn({3, 3}).to(torch::kBFloat16)},
      {"i64", torch::tensor({int64_t{-1}, int64_t{2}, int64_t{1} << 40}, torch::kInt64)},
      {"i32", torch::tensor({-7, 7}, torch::kInt32)},
      {"i16", torch::tensor({-3}, torch::kInt16)},
      {"i8", torch::tensor({-128, 127}, torch::kInt8)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(3.5)},
      {"empty", torch::zeros({0, 4})},
      {"strided", torch::arange(12.0).view({3, 4}).t()},  // non-contiguous: written in logical order
  };
  trainer::io::save_safetensors(path, in, {{"step", "42"}});
  auto f = trainer::io::load_safetensors(path);
  REQUIRE(f.tensors.size() == in.size());
  std::map<std::string, torch::Tensor> got(f.tensors.begin(), f.tensors.end());
  for (const auto& [name, t] : in) {
    INFO(name);
    REQUIRE(got.count(name));
    CHECK(got[name].scalar_type() == t.scalar_type());
    CHECK(got[name].sizes() == t.sizes());
    CHECK(torch::equal(got[name], t));
  }
  CHECK(f.metadata.at("step") == "42");
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.path == path);
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))  // the temporary file was renamed
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("safetensors writer aligns the data area and every tensor to its element size", "[unit]") {
  auto dir = trainer::test::scratch_dir("safetensors_layout");
  const auto path = (dir / "t.safetensors").string();
  trainer::io::save_safetensors(path, {{"a", torch::ones({3}, torch::kUInt8)}, {"b", torch::ones({1}, torch::kFloat64)}});
  const std::string bytes = trainer::test::read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);
  const std::string header = bytes.substr(8, n);
  // the 8-byte tensor comes first, so it starts at offset 0 and the 1-byte one after it
  CHECK(header.find(R"("b":{"data_offsets":[0,8])") != std::string::npos);
  CHECK(header.find(R"("a":{"data_offsets":[8,11])") != std::string::npos);
  CHECK(bytes.size() == 8 + n + 11);
}

TEST_CASE("safetensors writer refuses duplicate names and unsupported dtypes", "[unit]") {
  auto dir = trainer::test::scratch_dir("safetensors_writer_errors");
  const auto path = (dir / "t.safetensors").string();
  CHECK_THROWS_WITH(trainer::io::save_safetensors(path, {{"a", torch::ones(1)}, {"a", torch::ones(1)}}),
                    path + ": tensor name 'a' appears twice");
  CHECK_THROWS_WITH(trainer::io::save_safetensors(path, {{"c", torch::ones(1, torch::kComplexFloat)}}),
                    path + ": tensor 'c': safetensors cannot hold dtype ComplexFloat");
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("safetensors reader: a missing file", "[unit]") {
  const std::string path = std::string(TRAINER_TEST_TMP) + "/no/such/file.safetensors";
  CHECK(load_error(path) == path + ": cannot open: No such file or directory");
}

TEST_CASE("safetensors reader: a file shorter than the header length", "[unit]") {
  auto dir = trainer::test::scratch_dir("safetensors_short");
  const auto path = (dir / "short.safetensors").string();
  trainer::test::write_file(path, "abc");
  CHECK(load_error(path) == path + ": file is 3 bytes, too short for the 8-byte header length");
}

TEST_CASE("safetensors reader: a header length over the 100 MB limit", "[unit]") {
  auto path = craft("huge_header", "{}", 0, 200'000'000);
  CHECK(load_error(path) == path + ": header length 200000000 exceeds the limit of 100000000 bytes");
}

TEST_CASE("safetensors reader: a header length past the end of the file", "[unit]") {
  auto path = craft("truncated_header", "{}", 0, 64);
  CHECK(load_error(path) == path + ": header length 64 exceeds the 2 bytes that follow it in the file");
}

TEST_CASE("safetensors reader: a header that is not JSON", "[unit]") {
  auto path = craft("not_json", "{\"a\": [1,", 0);
  CHECK_THAT(load_error(path), Catch::StartsWith(path + ": header is not valid JSON: "));
}

TEST_CASE("safetensors reader: a header that is not a JSON object", "[unit]") {
  auto path = craft("not_object", "[1, 2]", 0);
  CHECK(load_error(path) == path + ": the header does not start with '{' (a safetensors header is one JSON object): "
                                   "not a safetensors file");
}

TEST_CASE("safetensors reader: an entry without dtype, shape or data_offsets", "[unit]") {
  auto p1 = craft("no_dtype", R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4);
  CHECK(load_error(p1) == p1 + ": tensor 'w': missing 'dtype'");
  auto p2 = craft("no_shape", R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4);
  CHECK(load_error(p2) == p2 + ": tensor 'w': missing 'shape'");
  auto p3 = craft("no_offsets", R"({"w": {"dtype": "F32", "shape": [1]}})", 4);
  CHECK(load_error(p3) == p3 + ": tensor 'w': missing 'data_offsets'");
  auto p4 = craft("entry_not_object", R"({"w": 3})", 4);
  CHECK(load_error(p4) == p4 + ": tensor 'w': header entry is not a JSON object");
}

TEST_CASE("safetensors reader: an unknown dtype", "[unit]") {
  auto path = craft("bad_dtype", R"({"w": {"dtype": "F8_E5M2", "shape": [4], "data_offsets": [0, 4]}})", 4);
  CHECK(load_error(path) == path + ": tensor 'w': unsupported dtype 'F8_E5M2' (known: F64, F32, F16, BF16, I64, I32, "
                                   "I16, I8, U8, BOOL)");
}

TEST_CASE("safetensors reader: a negative or non-integer shape", "[unit]") {
  auto p1 = craft("neg_shape", R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4);
  CHECK(load_error(p1) == p1 + ": tensor 'w': 'shape' must be a list of non-negative integers");
  auto p2 = craft("float_shape", R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4);
  CHECK(load_error(p2) == p2 + ": tensor 'w': 'shape' must be a list of non-negative integers");
}

TEST_CASE("safetensors reader: a shape whose element count overflows", "[unit]") {
  auto path = craft("overflow_shape",
                    R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4);
  CHECK(load_error(path) == path + ": tensor 'w': shape is too large (element count overflows)");
}

TEST_CASE("safetensors reader: malformed data_offsets", "[unit]") {
  auto p1 = craft("offsets_reversed", R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [4, 0]}})", 4);
  CHECK(load_error(p1) == p1 + ": tensor 'w': 'data_offsets' must be [begin, end] with 0 <= begin <= end");
  auto p2 = craft("offsets_three", R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 2, 4]}})", 4);
  CHECK(load_error(p2) == p2 + ": tensor 'w': 'data_offsets' must be [begin, end] with 0 <= begin <= end");
}

TEST_CASE("safetensors reader: data_offsets beyond the end of the file", "[unit]") {
  auto path = craft("offsets_outside", R"({"w": {"dtype": "F32", "shape": [100], "data_offsets": [0, 400]}})", 16);
  CHECK(load_error(path) == path + ": tensor 'w': data_offsets [0, 400] exceed the data area of 16 bytes");
}

TEST_CASE("safetensors reader: a byte length that disagrees with dtype and shape", "[unit]") {
  auto path = craft("length_mismatch", R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 24);
  CHECK(load_error(path) == path + ": tensor 'w': dtype F32 and shape [2, 3] need 24 bytes, data_offsets give 20");
}

TEST_CASE("safetensors reader: overlapping tensors", "[unit]") {
  auto path = craft("overlap",
                    R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                    R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                    24);
  CHECK(load_error(path) == path + ": tensors 'a' [0, 16) and 'b' [8, 24) overlap");
}

TEST_CASE("safetensors reader: __metadata__ that is not a map of strings", "[unit]") {
  auto path = craft("bad_metadata", R"({"__metadata__": {"step": 3}})", 0);
  CHECK(load_error(path) == path + ": __metadata__ must map strings to strings ('step' is not a string)");
}

TEST_CASE("safetensors reader: a gap, trailing bytes or a header not starting with '{' are refused (as load_file)",
          "[unit]") {
  auto gap = craft("gap", R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]}})", 6);
  CHECK(load_error(gap) == gap + ": tensor 'a' starts at byte 4 of the data area, leaving a gap of 4 bytes no tensor holds");
  auto trailing = craft("trailing", R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", 18);
  CHECK(load_error(trailing) == trailing + ": 16 bytes follow the last tensor (the tensors hold 2 of the 18 data bytes): "
                                           "a damaged or altered file");
  auto spaces = craft("spaces", std::string(1000, ' '), 0);
  CHECK(load_error(spaces) == spaces + ": the header does not start with '{' (a safetensors header is one JSON object): "
                                       "not a safetensors file");
  // the valid twins: dense tensors, an empty one, a header padded with spaces
  auto ok = craft("dense", R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}, )"
                           R"("e": {"dtype": "F32", "shape": [0], "data_offsets": [2, 2]}, )"
                           R"("b": {"dtype": "U8", "shape": [1], "data_offsets": [2, 3]}}    )", 3);
  auto f = trainer::io::load_safetensors(ok);
  REQUIRE(f.tensors.size() == 3);
  CHECK(torch::equal(f.tensors[0].second, torch::full({2}, 1, torch::kUInt8)));
}

namespace {
struct Tiny : torch::nn::Module {
  Tiny() {
    lin = register_module("lin", torch::nn::Linear(3, 2));
    register_buffer("steps", torch::zeros({1}, torch::kLong));
  }
  torch::nn::Linear lin{nullptr};
};
struct TiedTiny : Tiny, trainer::io::TiedState {
  std::vector<std::pair<std::string, std::string>> tied_names() const override { return {{"head.weight", "lin.weight"}}; }
};
}  // namespace

TEST_CASE("load_state_into lists every missing, unexpected and mis-shaped name in one message", "[unit]") {
  Tiny m;
  trainer::io::SafetensorsFile f;
  f.path = "ckpt.safetensors";
  f.tensors = {{"lin.weight", torch::zeros({2, 4})}, {"extra.a", torch::zeros(1)}, {"extra.b", torch::zeros(1)}};
  CHECK_THROWS_WITH(trainer::io::load_state_into(m, f),
                    "ckpt.safetensors: does not match the model; missing (2): lin.bias, steps; unexpected (2): "
                    "extra.a, extra.b; mis-shaped (1): lin.weight (file [2, 4], model [2, 3])");
}

TEST_CASE("load_state_into non-strict loads what matches and ignores the rest", "[unit]") {
  Tiny m;
  trainer::io::SafetensorsFile f;
  f.tensors = {{"lin.bias", torch::tensor({1.0f, 2.0f})}, {"extra", torch::zeros(1)}};
  trainer::io::load_state_into(m, f, /*strict=*/false);
  CHECK(torch::equal(m.lin->bias, torch::tensor({1.0f, 2.0f})));
}

TEST_CASE("a released weight keeps its shape, reads zeros, refuses writes, and loading skips it", "[unit]") {
  Tiny m;
  auto w = m.lin->weight;
  REQUIRE_FALSE(trainer::io::is_released(w));
  trainer::io::release_weight(m.lin->weight);
  CHECK(trainer::io::is_released(m.lin->weight));
  CHECK(m.lin->weight.sizes() == torch::IntArrayRef({2, 3}));
  CHECK(m.lin->weight.storage().nbytes() == sizeof(float));
  CHECK(torch::equal(m.lin->weight, torch::zeros({2, 3})));
  {
    torch::NoGradGuard ng;
    CHECK_THROWS(m.lin->weight.copy_(torch::ones({2, 3})));
  }
  // a freed storage that keeps its strides (dist.sharding full) is not a released weight
  auto freed = torch::ones({2, 3});
  freed.storage().set_nbytes(0);
  CHECK_FALSE(trainer::io::is_released(freed));
  // strict loading neither needs nor writes it; the rest loads
  trainer::io::SafetensorsFile f;
  f.tensors = {{"lin.bias", torch::tensor({1.0f, 2.0f})}, {"steps", torch::zeros({1}, torch::kLong)}};
  trainer::io::load_state_into(m, f);
  CHECK(torch::equal(m.lin->bias, torch::tensor({1.0f, 2.0f})));
  f.tensors.emplace_back("lin.weight", torch::ones({2, 3}));
  trainer::io::load_state_into(m, f);
  CHECK(trainer::io::is_released(m.lin->weight));
}

TEST_CASE("tied tensors are written under both names and load from either", "[unit]") {
  TiedTiny a;
  auto state = trainer::io::named_state(a);
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  REQUIRE(by_name.count("head.weight"));
  CHECK(by_name["head.weight"].data_ptr() == a.lin->weight.data_ptr());

  TiedTiny b;
  trainer::io::SafetensorsFile only_alias;
  only_alias.tensors = {{"head.weight", torch::full({2, 3}, 5.0f)}, {"lin.bias", torch::zeros(2)},
                        {"steps", torch::zeros({1}, torch::kLong)}};
  trainer::io::load_state_into(b, only_alias);
  CHECK(torch::equal(b.lin->weight, torch::full({2, 3}, 5.0f)));

  trainer::io::SafetensorsFile conflicting = only_alias;
  conflicting.path = "x.safetensors";
  conflicting.tensors.emplace_back("lin.weight", torch::zeros({2, 3}));
  CHECK_THROWS_WITH(trainer::io::load_state_into(b, conflicting),
                    "x.safetensors: does not match the model; tied tensors that differ (1): 'head.weight' and "
                    "'lin.weight'");
}

TEST_CASE("load_state_into refuses a dtype it cannot convert faithfully, naming the tensor, and fp16 converts", "[unit]") {
  Tiny m;
  trainer::io::SafetensorsFile f;
  f.path = "ckpt.safetensors";
  f.tensors = {{"lin.weight", torch::ones({2, 3}, torch::kBool)}, {"lin.bias", torch::zeros({2}, torch::kInt32)},
               {"steps", torch::full({1}, 70000, torch::kInt64)}};
  try {
    trainer::io::load_state_into(m, f, true);
    FAIL("no error");
  } catch (const SafetensorsError& e) {
    CHECK(std::string(e.what()) ==
          "ckpt.safetensors: does not match the model; dtypes that cannot be loaded faithfully (2): lin.weight: a bool "
          "tensor into a float32 tensor: a mask of true/false is not a tensor of values (save the tensor the model "
          "holds), lin.bias: an int32 tensor into a float32 tensor: not a conversion that keeps the values' meaning "
          "(save the tensor in the model's dtype)");
  }
  CHECK(m.lin->weight.sum().item<float>() != 6.0f);  // nothing copied
  const auto w = torch::arange(6, torch::kFloat32).reshape({2, 3});
  f.tensors = {{"lin.weight", w.to(torch::kFloat16)}, {"lin.bias", torch::ones({2}, torch::kBFloat16)},
               {"steps", torch::full({1}, 7, torch::kInt32)}};
  trainer::io::load_state_into(m, f, true);
  CHECK(torch::equal(m.lin->weight, w));
  CHECK(m.lin->weight.scalar_type() == torch::kFloat32);
  CHECK(m.named_buffers()["steps"].item<int64_t>() == 7);
  f.tensors[0].second = torch::full({2, 3}, 1e6, torch::kFloat64);
  m.lin->weight.set_data(m.lin->weight.data().to(torch::kFloat16));  // a half model: 1e6 is beyond its range
  CHECK_THROWS_WITH(trainer::io::load_state_into(m, f, true),
                    Catch::Contains("lin.weight: a float64 tensor into a float16 tensor: finite values beyond "
                                    "float16's range would become infinite"));
  f.tensors[0].second = torch::complex(w, w);
  f.tensors[2].second = torch::full({1}, 1, torch::kInt64);
  m.lin->weight.set_data(m.lin->weight.data().to(torch::kFloat32));
  CHECK_THROWS_WITH(trainer::io::load_state_into(m, f, true),
                    Catch::Contains("lin.weight: a complex64 tensor into a float32 tensor: the imaginary part would be lost"));
}
