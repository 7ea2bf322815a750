// io/torch_pickle.cpp against a hand-built torch.save archive (an OrderedDict state_dict with
// its _metadata, as PyTorch writes it): read exactly; every truncation and random damage of the
// pickle is a TorchSaveError, never a crash or another exception. Real torch.save files:
// tests/python/test_finetune.py.
#include <catch2/catch.hpp>

#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <random>

#include "io/torch_pickle.hpp"

using namespace trainer;

namespace {

// Pickle protocol 2 as Python's pickler writes torch.save(model.state_dict()).
struct PickleText {
  std::string b = "\x80\x02";
  PickleText& op(const std::string& s) { return b += s, *this; }
  PickleText& put(int memo) { return b += 'q', b += static_cast<char>(memo), *this; }
  PickleText& get(int memo) { return b += 'h', b += static_cast<char>(memo), *this; }
  PickleText& str(const std::string& s) {
    b += 'X';
    for (int k = 0; k < 4; ++k) b += static_cast<char>((s.size() >> (8 * k)) & 0xFF);
    b += s;
    return *this;
  }
  PickleText& small(int v) { return b += 'K', b += static_cast<char>(v), *this; }
  // (_rebuild_tensor_v2 on the stack) ((storage pid), offset 0, size, stride, False, OrderedDict()) REDUCE
  PickleText& tensor_args(const char* storage_class, const char* key, int numel, std::vector<int> size,
                          std::vector<int> stride) {
    op("((").str("storage").op(std::string("ctorch\n") + storage_class + "\n").str(key).str("cpu").small(numel);
    op("tQ").small(0).op("(");
    for (int s : size) small(s);
    op("t(");
    for (int s : stride) small(s);
    op("t\x89");
    return get(0).op(")RtR");
  }
};

std::string state_pickle() {
  PickleText p;
  p.op("ccollections\nOrderedDict\n").put(0).op(")R").put(1).op("(");
  p.str("w").op("ctorch._utils\n_rebuild_tensor_v2\n").put(2).tensor_args("FloatStorage", "0", 6, {2, 3}, {3, 1});
  p.str("n").get(2).tensor_args("LongStorage", "1", 1, {}, {});
  p.op("u}").str("_metadata").op("}sb.");  // SETITEMS, then BUILD with the state {'_metadata': {}}
  return p.b;
}

std::string archive_with(const std::string& pickle, size_t float_bytes = 24) {
  std::string out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* d, size_t n) {
    out.append(static_cast<const char*>(d), n);
    return n;
  });
  const float f[6] = {1, 2, 3, 4, 5, 6};
  const int64_t n = 42;
  w.writeRecord("data.pkl", pickle.data(), pickle.size());
  w.writeRecord("data/0", f, float_bytes);
  w.writeRecord("data/1", &n, sizeof n);
  w.writeEndOfFile();
  return out;
}

}  // namespace

TEST_CASE("torch_pickle reads an OrderedDict state_dict of a torch.save archive", "[unit]") {
  const auto sd = io::read_torch_state_dict("sd.pth", archive_with(state_pickle()));
  REQUIRE(sd.size() == 2);
  CHECK(sd[0].first == "w");
  CHECK(torch::equal(sd[0].second, torch::arange(1, 7, torch::kFloat).view({2, 3})));
  CHECK(sd[1].first == "n");
  CHECK(sd[1].second.dim() == 0);
  CHECK(sd[1].second.item<int64_t>() == 42);
  CHECK_THROWS_WITH(io::read_torch_state_dict("short.pth", archive_with(state_pickle(), 8)),
                    "short.pth: tensor 'w': data/0 holds 8 bytes, but its storage type torch.FloatStorage of 6 "
                    "elements needs 24 bytes: the storage type does not match its data (or the record is damaged)");
}

TEST_CASE("torch_pickle: every truncated or damaged pickle is a TorchSaveError", "[unit]") {
  const std::string good = state_pickle();
  for (size_t n = 0; n < good.size(); ++n) {
    INFO("truncated to " << n << " bytes");
    CHECK_THROWS_AS(io::read_torch_state_dict("cut.pth", archive_with(good.substr(0, n))), io::TorchSaveError);
  }
  std::mt19937 rng(7);
  int errors = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string bad = good;
    for (int k = 0; k < 1 + trial % 3; ++k) bad[rng() % bad.size()] = static_cast<char>(rng() & 0xFF);
    INFO("trial " << trial);
    try {
      io::read_torch_state_dict("bad.pth", archive_with(bad));
    } catch (const io::TorchSaveError&) {
      ++errors;
    }  // any other exception escapes and fails the test
  }
  CHECK(errors > 200);  // most damage is detected; the rest still reads as some dict of tensors
}
