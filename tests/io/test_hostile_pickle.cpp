// Hostile torch.save files (issues 28.3 and 29): real torch.save archives (tests/reference/pickle_seeds,
// written by PyTorch) mutated at the level of pickle opcodes, and hand-made pickles that nest deep,
// build millions of objects, lie about their protocol or frames. The reader returns a state_dict or
// throws a TorchSaveError naming the file, never crashes (this file also runs under ASan + UBSan:
// test_asan_readers), never hangs (error_within), never throws anything else.
#include <catch2/catch.hpp>

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <map>
#include <random>

#include "hostile_util.hpp"
#include "io/torch_pickle.hpp"
#include "test_util.hpp"
#include <fmt/format.h>

using namespace trainer;
using namespace trainer::test;

namespace {

struct HpArchive {
  std::vector<std::pair<std::string, std::string>> records;  // data.pkl first
};

HpArchive hp_open(const std::string& bytes) {
  auto adapter = std::make_shared<caffe2::serialize::MemoryReadAdapter>(bytes.data(), static_cast<off_t>(bytes.size()));
  caffe2::serialize::PyTorchStreamReader r(adapter);
  HpArchive a;
  for (const auto& name : r.getAllRecords()) {
    if (name == "version" || name == ".data/version" || name == ".data/serialization_id") continue;  // the writer's own
    auto [ptr, n] = r.getRecord(name);
    a.records.emplace_back(name, std::string(static_cast<const char*>(ptr.get()), n));
  }
  std::stable_partition(a.records.begin(), a.records.end(), [](const auto& r) { return r.first == "data.pkl"; });
  return a;
}

std::string hp_write(const HpArchive& a, const std::string& pickle) {
  std::string out;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* d, size_t n) {
    out.append(static_cast<const char*>(d), n);
    return n;
  });
  for (const auto& [name, data] : a.records) {
    const std::string& body = name == "data.pkl" ? pickle : data;
    w.writeRecord(name, body.data(), body.size());
  }
  w.writeEndOfFile();
  return out;
}

// Where each opcode of a pickle starts and how long it is (with its argument), for the opcodes
// torch.save writes; stops at the first it does not know.
std::vector<std::pair<size_t, size_t>> hp_opcodes(const std::string& p) {
  std::vector<std::pair<size_t, size_t>> out;
  auto le = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int k = 0; k < n && at + k < p.size(); ++k) v |= uint64_t(uint8_t(p[at + k])) << (8 * k);
    return v;
  };
  for (size_t i = 0; i < p.size();) {
    const uint8_t op = p[i];
    size_t len = 1;
    switch (op) {
      case 'K': case 'q': case 'h': case 0x80: len = 2; break;
      case 'M': len = 3; break;
      case 'J': case 'r': case 'j': len = 5; break;
      case 0x95: len = 9; break;
      case 0x8a: case 0x8c: case 'U': len = 2 + (i + 1 < p.size() ? uint8_t(p[i + 1]) : 0); break;
      case 'X': case 'T': len = 5 + le(i + 1, 4); break;
      case 'c': {
        const size_t a = p.find('\n', i), b = a == std::string::npos ? a : p.find('\n', a + 1);
        len = b == std::string::npos ? p.size() - i : b + 1 - i;
        break;
      }
      case 'N': case 0x88: case 0x89: case '(': case ')': case 0x85: case 0x86: case 0x87: case 't': case ']':
      case '}': case 'a': case 'e': case 's': case 'u': case 0x94: case '0': case 0x93: case 'R': case 'Q':
      case 'b': case '.': case 'G': len = op == 'G' ? 9 : 1; break;
      default: return out;
    }
    if (i + len > p.size()) return out;
    out.emplace_back(i, len);
    i += len;
  }
  return out;
}

uint64_t hp_extreme(std::mt19937_64& rng) {
  static const uint64_t kEdges[] = {0, 1, 2, 255, 256, 65535, 0x7fffffffull, 0x80000000ull, 0xffffffffull,
                                    1ull << 62, 0xffffffffffffffffull};
  return kEdges[rng() % std::size(kEdges)];
}

// One opcode-level mutation: drop, repeat or swap opcodes, change an opcode or its argument, cut.
std::string hp_mutate(const std::string& p, std::mt19937_64& rng) {
  const auto ops = hp_opcodes(p);
  if (ops.size() < 2) return p;
  const auto [at, len] = ops[rng() % ops.size()];
  const auto [at2, len2] = ops[rng() % ops.size()];
  std::string out = p;
  switch (rng() % 7) {
    case 0: return out.erase(at, len);
    case 1: return out.insert(at, p.substr(at, len));
    case 2: {
      if (at2 <= at) return out;
      return p.substr(0, at) + p.substr(at2, len2) + p.substr(at + len, at2 - at - len) + p.substr(at, len) +
             p.substr(at2 + len2);
    }
    case 3: {
      static const char kOps[] = "NK)t]}aesuq0RQb.(\x85\x86\x87\x88\x94\x93\x95\x80";
      out[at] = kOps[rng() % (sizeof kOps - 1)];
      return out;
    }
    case 4: {  // an argument byte (a length, an int, a memo index) made extreme
      if (len < 2) return out;
      const uint64_t v = hp_extreme(rng);
      for (size_t k = 1; k < len && k < 9; ++k) out[at + k] = static_cast<char>(v >> (8 * ((k - 1) % 8)));
      return out;
    }
    case 5: return out.substr(0, at);
    default: return out.insert(at, 1 + rng() % 3, static_cast<char>(rng()));
  }
}

std::string hp_seed(const std::string& name) {
  return read_file(source_path("tests/reference/pickle_seeds/" + name));
}

// The reader's verdict on `bytes`: "" (loaded) or its error, which must be a TorchSaveError.
std::string hp_verdict(const std::string& path, const std::string& bytes) {
  return error_within(20, [&] {
    try {
      io::read_torch_state_dict(path, bytes);
    } catch (const io::TorchSaveError&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("NOT A TorchSaveError: ") + e.what());
    }
  }, path.c_str());
}

}  // namespace

TEST_CASE("hostile pickle: the real torch.save seeds load, and their dtypes and views are PyTorch's", "[unit]") {
  for (const char* name : {"gpt.pt", "protocol4.pt", "named.pt", "convbn.pt"}) {
    INFO(name);
    CHECK(hp_verdict(name, hp_seed(name)).empty());
  }
  const auto sd = io::read_torch_state_dict("dtypes.pt", hp_seed("dtypes.pt"));
  std::map<std::string, torch::Tensor> by;
  for (const auto& [k, v] : sd) by[k] = v;
  const auto base = torch::arange(12, torch::kFloat32).reshape({3, 4});
  const std::pair<const char*, torch::ScalarType> kinds[] = {
      {"f32", torch::kFloat32}, {"f64", torch::kFloat64}, {"f16", torch::kFloat16}, {"bf16", torch::kBFloat16},
      {"i64", torch::kInt64},   {"i32", torch::kInt32},   {"i16", torch::kInt16},   {"i8", torch::kInt8},
      {"u8", torch::kUInt8}};
  for (const auto& [k, t] : kinds) {
    INFO(k);
    REQUIRE(by.count(k));
    CHECK(by[k].scalar_type() == t);
    CHECK(torch::equal(by[k], base.to(t)));
  }
  CHECK(torch::equal(by["bool"], base > 5));
  CHECK(torch::equal(by["c64"], torch::complex(base, -base)));
  CHECK(by["c128"].scalar_type() == torch::kComplexDouble);
  CHECK(by["scalar"].dim() == 0);
  CHECK(by["scalar"].item<float>() == 1.5f);
  CHECK(by["empty"].sizes() == c10::IntArrayRef{0, 2});
  CHECK(torch::equal(by["t"], base.t()));
  CHECK(by["t"].strides() == c10::IntArrayRef{1, 4});  // the view as saved, not a copy
  CHECK(torch::equal(by["slice"], base.slice(0, 1).slice(1, 1, 3)));
  // an optimizer's state_dict is no model state_dict: refused, naming the entry
  CHECK(hp_verdict("optimizer.pt", hp_seed("optimizer.pt")) ==
        "optimizer.pt: entry 'state' is a dict, not a tensor: not a plain state_dict (a training checkpoint? save its "
        "model's state_dict)");
}

TEST_CASE("hostile pickle: opcode-level mutations of real torch.save files load or fail naming the file", "[unit]") {
  std::mt19937_64 rng(28003);
  int loaded = 0, refused = 0;
  for (const char* name : {"gpt.pt", "protocol4.pt", "convbn.pt", "optimizer.pt", "dtypes.pt", "named.pt"}) {
    const auto archive = hp_open(hp_seed(name));
    const std::string pickle = archive.records.front().second;
    for (int i = 0; i < 250; ++i) {
      std::string bad = pickle;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) bad = hp_mutate(bad, rng);
      const std::string path = fmt::format("m{}_{}", i, name);
      const std::string err = hp_verdict(path, hp_write(archive, bad));
      INFO(name << " mutation " << i << ": " << err);
      CHECK(err.find("NOT A TorchSaveError") == std::string::npos);
      if (!err.empty()) CHECK(starts_with(err, path + ": "));
      (err.empty() ? loaded : refused) += 1;
    }
  }
  CHECK(loaded >= 30);   // harmless mutations (a repeated BINPUT, a swapped pair) still load
  CHECK(refused >= 600);
}

TEST_CASE("hostile pickle: deep nesting, millions of objects, memo cycles are errors, not crashes", "[unit]") {
  const auto archive = hp_open(hp_seed("convbn.pt"));
  const int n = 100000;
  const std::string deep = "\x80\x02" + std::string(n, ']') + std::string(n - 1, 'a') + ".";
  CHECK(hp_verdict("deep.pt", hp_write(archive, deep)) ==
        "deep.pt: the pickle nests containers more than 1000 deep: not a state_dict");
  const std::string tuples = "\x80\x02" + std::string(1, 'N') + std::string(n, '\x85') + ".";  // ((((None,),),),)
  CHECK(hp_verdict("tuples.pt", hp_write(archive, tuples)) ==
        "tuples.pt: the pickle nests containers more than 1000 deep: not a state_dict");
  const std::string marks = "\x80\x02" + std::string(n, '(') + ".";
  CHECK(hp_verdict("marks.pt", hp_write(archive, marks)) ==
        "marks.pt: the pickle nests more than 1000 MARKs: not a state_dict");
  const std::string many = "\x80\x02" + std::string(1'200'000, 'N') + ".";
  CHECK(hp_verdict("many.pt", hp_write(archive, many)) ==
        "many.pt: the pickle builds more than 1048576 objects: not a state_dict");
  // a list that holds itself (through the memo), 500 times over: freed without recursion or leak
  std::string cycle("\x80\x02]q\x00", 5);
  for (int i = 0; i < 500; ++i) cycle += std::string("h\x00" "a", 3);  // BINGET 0, APPEND
  cycle += ".";
  CHECK(hp_verdict("cycle.pt", hp_write(archive, cycle)) ==
        "cycle.pt: holds a pickled list, not a state_dict (a dict of name -> tensor); save model.state_dict() with torch.save");
}

TEST_CASE("hostile pickle: PROTO and FRAME are what torch.save writes, or the file is refused", "[unit]") {
  const auto archive = hp_open(hp_seed("convbn.pt"));
  const std::string pickle = archive.records.front().second;
  REQUIRE(pickle.substr(0, 2) == "\x80\x02");
  CHECK(hp_verdict("p255.pt", hp_write(archive, "\x80\xff" + pickle.substr(2))) ==
        "p255.pt: pickle protocol 255: torch.save writes protocols 2 to 5 (corrupt?)");
  CHECK(hp_verdict("p0.pt", hp_write(archive, pickle.substr(2))) ==
        "p0.pt: the pickle (data.pkl) does not start with PROTO: not written by torch.save (or corrupt)");
  CHECK(hp_verdict("p2twice.pt", hp_write(archive, "\x80\x02" + pickle)) ==
        "p2twice.pt: a second PROTO opcode inside the pickle: corrupt");
  const auto p4 = hp_open(hp_seed("protocol4.pt"));
  std::string framed = p4.records.front().second;
  REQUIRE(framed[2] == '\x95');
  for (int k = 0; k < 8; ++k) framed[3 + k] = k == 7 ? '\x40' : '\0';  // 2^62
  const std::string err = hp_verdict("frame.pt", hp_write(p4, framed));
  CHECK(starts_with(err, "frame.pt: a FRAME of 4611686018427387904 bytes where "));
  CHECK(err.find(" remain in the pickle: truncated or corrupt") != std::string::npos);
}
