#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "config/file_read.hpp"
#include "config/file_write.hpp"
#include "io/weight_copy.hpp"

namespace trainer::io {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so must the host be");

using json = nlohmann::json;

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
};
constexpr DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool},
};

std::string known_dtype_list() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw SafetensorsError(path + ": " + what); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

struct Entry {
  std::string name;
  torch::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the start of the data area
};

bool as_u64(const json& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

Entry parse_entry(const std::string& path, const std::string& name, const json& j, uint64_t data_bytes) {
  const std::string where = "tensor '" + name + "'";
  if (!j.is_object()) fail(path, where + ": header entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) fail(path, where + ": missing '" + key + "'");
  Entry e;
  e.name = name;
  if (!j["dtype"].is_string()) fail(path, where + ": 'dtype' is not a string");
  const auto dtype = j["dtype"].get<std::string>();
  const auto* info = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const DtypeInfo& d) { return dtype == d.name; });
  if (info == std::end(kDtypes)) fail(path, where + ": unsupported dtype '" + dtype + "' (known: " + known_dtype_list() + ")");
  e.type = info->type;

  const json& shape = j["shape"];
  if (!shape.is_array()) fail(path, where + ": 'shape' must be a list of non-negative integers");
  uint64_t numel = 1;
  for (const auto& d : shape) {
    uint64_t v = 0;
    if (!as_u64(d, v) || v > static_cast<uint64_t>(INT64_MAX))
      fail(path, where + ": 'shape' must be a list of non-negative integers");
    if (__builtin_mul_overflow(numel, v, &numel)) fail(path, where + ": shape is too large (element count overflows)");
    e.shape.push_back(static_cast<int64_t>(v));
  }
  const json& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !as_u64(off[0], e.begin) || !as_u64(off[1], e.end) || e.begin > e.end)
    fail(path, where + ": 'data_offsets' must be [begin, end] with 0 <= begin <= end");
  if (e.end > data_bytes)
    fail(path, where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                   "] exceed the data area of " + std::to_string(data_bytes) + " bytes");
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(c10::elementSize(e.type)), &nbytes))
    fail(path, where + ": shape is too large (byte count overflows)");
  if (nbytes != e.end - e.begin)
    fail(path, where + ": dtype " + dtype + " and shape " + shape_text(e.shape) + " need " + std::to_string(nbytes) +
                   " bytes, data_offsets give " + std::to_string(e.end - e.begin));
  return e;
}

// Reads exactly n bytes at offset, or throws.
void read_exact(int fd, const std::string& path, void* dst, uint64_t n, uint64_t offset, const std::string& what) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path, "cannot read " + what + ": " + std::strerror(errno));
    if (got == 0) fail(path, "file ended while reading " + what);
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, const std::string& path, const void* src, size_t n) {
  const auto* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, std::min<size_t>(n, 1u << 30));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail(path, std::string("cannot write: ") + std::strerror(errno));
    p += put;
    n -= static_cast<size_t>(put);
  }
}

}  // namespace

std::string safetensors_dtype_name(torch::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  throw std::invalid_argument(std::string("safetensors cannot hold dtype ") + c10::toString(t));
}

SafetensorsFile load_safetensors(const std::string& path) {
  const RegularFile file = RegularFile::open<SafetensorsError>(path);  // a FIFO would block, a device never end
  const uint64_t file_bytes = file.size();
  if (file_bytes < 8)
    fail(path, "file is " + std::to_string(file_bytes) + " bytes, too short for the 8-byte header length");

  uint64_t header_bytes = 0;  // little-endian u64; the host is little-endian (static_assert above)
  read_exact(file.fd(), path, &header_bytes, 8, 0, "the header length");
  if (header_bytes > kSafetensorsMaxHeaderBytes)
    fail(path, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                   std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
  if (header_bytes > file_bytes - 8)
    fail(path, "header length " + std::to_string(header_bytes) + " exceeds the " + std::to_string(file_bytes - 8) +
                   " bytes that follow it in the file");
  std::string header(header_bytes, '\0');
  read_exact(file.fd(), path, header.data(), header_bytes, 8, "the header");

  // As the reference implementation: the header is a JSON object from its first byte (trailing spaces
  // are its padding). A header of 99 MB of spaces is refused here, before a parser sees it.
  if (header.empty() || header[0] != '{')
    fail(path, "the header does not start with '{' (a safetensors header is one JSON object): not a safetensors file");
  json j;
  try {
    j = json::parse(header);
  } catch (const json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(path, "header is not a JSON object");

  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - data_start;
  SafetensorsFile out;
  out.path = path;
  std::vector<Entry> entries;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) fail(path, "__metadata__ must map strings to strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail(path, "__metadata__ must map strings to strings ('" + mk + "' is not a string)");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, value, data_bytes));
  }

  // The tensors tile the data area exactly, as safetensors.torch.load_file requires: no two share
  // bytes, none leaves a gap, and nothing follows the last one (bytes no tensor accounts for are a
  // damaged or doctored file).
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  const Entry* prev = nullptr;
  uint64_t covered = 0;
  for (const auto& e : entries) {
    if (e.begin < covered)
      fail(path, "tensors '" + prev->name + "' [" + std::to_string(prev->begin) + ", " + std::to_string(prev->end) +
                     ") and '" + e.name + "' [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") overlap");
    if (e.begin > covered)
      fail(path, "tensor '" + e.name + "' starts at byte " + std::to_string(e.begin) + " of the data area, leaving a gap of " +
                     std::to_string(e.begin - covered) + " bytes no tensor holds");
    covered = e.end;
    if (e.end > e.begin) prev = &e;
  }
  if (covered != data_bytes)
    fail(path, std::to_string(data_bytes - covered) + " bytes follow the last tensor (the tensors hold " +
                   std::to_string(covered) + " of the " + std::to_string(data_bytes) +
                   " data bytes): a damaged or altered file");

  // The header is sound: now read the data, straight into the tensors.
  for (const auto& e : entries) {
    auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
    if (e.end > e.begin) read_exact(file.fd(), path, t.data_ptr(), e.end - e.begin, data_start + e.begin, "tensor '" + e.name + "'");
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  struct Item {
    const std::string* name;
    torch::Tensor t;
    std::string dtype;
  };
  std::vector<Item> items;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") fail(path, "'__metadata__' cannot name a tensor");
    if (!seen.insert(name).second) fail(path, "tensor name '" + name + "' appears twice");
    if (!t.defined()) fail(path, "tensor '" + name + "' is undefined");
    std::string dtype;
    try {
      dtype = safetensors_dtype_name(t.scalar_type());
    } catch (const std::invalid_argument& e) {
      fail(path, "tensor '" + name + "': " + e.what());
    }
    items.push_back({&name, t.detach().to(torch::kCPU).contiguous(), dtype});
  }
  // Largest elements first: every tensor then starts at a multiple of its element size.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.t.element_size() > b.t.element_size(); });

  json header = json::object();
  json meta = json::object();
  meta["format"] = "pt";  // what Hugging Face tools expect; a caller's value wins
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const auto& it : items) {
    const auto nbytes = static_cast<uint64_t>(it.t.nbytes());
    header[*it.name] = {{"dtype", it.dtype}, {"shape", it.t.sizes().vec()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t header_bytes = text.size();

  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string tmp = trainer::temporary_for(target).string();
  {
    Fd f;
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f.fd < 0) fail(path, "cannot create " + tmp + ": " + std::strerror(errno));
    try {
      write_all(f.fd, path, &header_bytes, 8);
      write_all(f.fd, path, text.data(), text.size());
      for (const auto& it : items) write_all(f.fd, path, it.t.data_ptr(), it.t.nbytes());
      if (::fsync(f.fd) != 0) fail(path, std::string("cannot fsync: ") + std::strerror(errno));
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, std::string("cannot rename the temporary file into place: ") + std::strerror(err));
  }
  Fd d;  // make the rename itself durable
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd >= 0) ::fsync(d.fd);
}

std::vector<std::pair<std::string, torch::Tensor>> named_state(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::unordered_map<std::string, torch::Tensor> by_name;
  for (const auto& p : m.named_parameters(true)) {
    out.emplace_back(p.key(), p.value());
    by_name[p.key()] = p.value();
  }
  for (const auto& b : m.named_buffers(true)) {
    out.emplace_back(b.key(), b.value());
    by_name[b.key()] = b.value();
  }
  if (const auto* tied = dynamic_cast<const TiedState*>(&m))
    for (const auto& [alias, owner] : tied->tied_names()) {
      auto it = by_name.find(owner);
      if (it != by_name.end()) out.emplace_back(alias, it->second);
    }
  return out;
}

void load_state_into(torch::nn::Module& m, const SafetensorsFile& f, bool strict) {
  const std::string path = f.path.empty() ? std::string("<in-memory safetensors>") : f.path;
  std::unordered_map<std::string, torch::Tensor> target;  // registered name -> module tensor
  std::vector<std::string> order;
  for (const auto& p : m.named_parameters(true)) target[p.key()] = p.value(), order.push_back(p.key());
  for (const auto& b : m.named_buffers(true)) target[b.key()] = b.value(), order.push_back(b.key());
  std::unordered_map<std::string, std::string> alias_of;  // alias -> registered name
  if (const auto* tied = dynamic_cast<const TiedState*>(&m))
    for (const auto& [alias, owner] : tied->tied_names()) alias_of[alias] = owner;

  std::unordered_map<std::string, const torch::Tensor*> source;  // registered name -> file tensor
  std::unordered_map<std::string, std::string> source_name;
  std::vector<std::string> unexpected, mis_shaped, conflicting;
  for (const auto& [name, t] : f.tensors) {
    std::string owner = name;
    if (auto a = alias_of.find(name); a != alias_of.end()) owner = a->second;
    if (!target.count(owner)) {
      unexpected.push_back(name);
      continue;
    }
    if (auto prev = source.find(owner); prev != source.end()) {
      // both names of a tied tensor are in the file: they must hold the same values
      if (!prev->second->sizes().equals(t.sizes()) || !torch::equal(*prev->second, t))
        conflicting.push_back("'" + source_name[owner] + "' and '" + name + "'");
      continue;
    }
    source[owner] = &t;
    source_name[owner] = name;
  }
  std::vector<std::string> missing, unfaithful, converted;
  for (const auto& name : order) {
    if (is_released(target[name])) continue;  // a weight this process does not hold: neither required nor loaded
    auto it = source.find(name);
    if (it == source.end()) {
      missing.push_back(name);
      continue;
    }
    const auto& want = target[name];
    if (!it->second->sizes().equals(want.sizes()))
      mis_shaped.push_back(source_name[name] + " (file " + shape_text(it->second->sizes().vec()) + ", model " +
                           shape_text(want.sizes().vec()) + ")");
    else if (auto why = weight_copy_problem(*it->second, want)) unfaithful.push_back(source_name[name] + ": " + *why);
    else if (auto c = weight_conversion(*it->second, want); !c.empty()) converted.push_back(source_name[name] + " (" + c + ")");
  }

  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  std::string problems;
  auto add = [&](const std::string& what, const std::vector<std::string>& v) {
    if (!v.empty()) problems += "; " + what + " (" + std::to_string(v.size()) + "): " + join(v);
  };
  if (strict) add("missing", missing);
  if (strict) add("unexpected", unexpected);
  add("mis-shaped", mis_shaped);
  add("tied tensors that differ", conflicting);
  add("dtypes that cannot be loaded faithfully", unfaithful);
  if (!problems.empty()) fail(path, "does not match the model" + problems);
  if (!converted.empty()) spdlog::info("{}: dtype converted ({}): {}", path, converted.size(), join(converted));

  torch::NoGradGuard no_grad;
  for (const auto& [name, src] : source) {
    auto& dst = target[name];
    if (is_released(dst)) continue;
    if (src->sizes().equals(dst.sizes())) dst.copy_(*src);  // keeps dst's device, dtype and memory format
  }
}

}  // namespace trainer::io
