// The state_dict of a torch.save zip archive, unpickled here rather than by torch::pickle_load:
// LibTorch 2.11's unpickler turns collections.OrderedDict (what model.state_dict() is) into None, so
// a real state_dict cannot be read through it. This reader knows the opcodes of pickle protocols 2-4
// that torch.save writes for a dict of tensors (and plain Python values around them), rebuilds
// tensors from the archive's data/<key> records, and refuses anything else (classes, modules,
// TorchScript) with a message. Every read is bounds-checked: a hostile file is an error.
#include "io/torch_pickle.hpp"

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <map>
#include <memory>

namespace trainer::io {
namespace {

struct PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

struct PickleValue {
  enum class Kind { None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Storage, Tensor } kind = Kind::None;
  int64_t i = 0;
  double f = 0;
  std::string s;                                  // Str; Global: "module.name"
  std::vector<PickleRef> items;                   // Tuple, List
  std::vector<std::pair<PickleRef, PickleRef>> dict;
  torch::Tensor tensor;                           // Storage (1-d, the whole storage) or Tensor
};

const char* pickle_kind_name(PickleValue::Kind k) {
  static const char* names[] = {"None", "bool", "int", "float", "str", "tuple", "list", "dict", "class", "storage", "tensor"};
  return names[static_cast<int>(k)];
}

PickleRef pickle_make(PickleValue::Kind k) {
  auto v = std::make_shared<PickleValue>();
  v->kind = k;
  return v;
}

// torch.<Name>Storage -> dtype
std::optional<torch::ScalarType> storage_dtype(const std::string& global) {
  static const std::map<std::string, torch::ScalarType> types = {
      {"torch.FloatStorage", torch::kFloat},   {"torch.DoubleStorage", torch::kDouble},
      {"torch.HalfStorage", torch::kHalf},     {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kLong},     {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort},   {"torch.CharStorage", torch::kChar},
      {"torch.ByteStorage", torch::kByte},     {"torch.BoolStorage", torch::kBool},
      {"torch.ComplexFloatStorage", torch::kComplexFloat}, {"torch.ComplexDoubleStorage", torch::kComplexDouble}};
  auto it = types.find(global);
  if (it == types.end()) return std::nullopt;
  return it->second;
}

class StateUnpickler {
 public:
  StateUnpickler(const std::string& path, caffe2::serialize::PyTorchStreamReader& archive, const char* data, size_t size)
      : path_(path), archive_(archive), p_(data), end_(data + size) {}

  PickleRef run() {
    for (;;) {
      const uint8_t op = byte();
      if (op == '.') {
        if (stack_.size() != 1) fail("the pickle ends with " + std::to_string(stack_.size()) + " values on its stack");
        return stack_.back();
      }
      step(op);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw TorchSaveError(path_ + ": " + why); }

  const char* take(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) fail("the pickle (data.pkl) ends in the middle of an opcode: truncated or corrupt");
    const char* at = p_;
    p_ += n;
    return at;
  }
  uint8_t byte() { return static_cast<uint8_t>(*take(1)); }
  uint64_t uint_le(size_t n) {
    const char* b = take(n);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(static_cast<uint8_t>(b[k])) << (8 * k);
    return v;
  }
  std::string line() {
    const char* nl = static_cast<const char*>(std::memchr(p_, '\n', static_cast<size_t>(end_ - p_)));
    if (!nl) fail("the pickle (data.pkl) ends in the middle of a GLOBAL: truncated or corrupt");
    std::string s(p_, nl);
    p_ = nl + 1;
    return s;
  }
  PickleRef pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("the pickle pops an empty stack: corrupt");
    auto v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<PickleRef> pop_to_mark() {
    if (marks_.empty()) fail("the pickle uses a MARK it never set: corrupt");
    std::vector<PickleRef> out(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return out;
  }
  PickleRef& top() {
    if (stack_.empty()) fail("the pickle reads an empty stack: corrupt");
    return stack_.back();
  }
  void push_int(int64_t v) {
    auto x = pickle_make(PickleValue::Kind::Int);
    x->i = v;
    stack_.push_back(x);
  }
  void push_str(size_t n) {
    auto x = pickle_make(PickleValue::Kind::Str);
    x->s.assign(take(n), n);
    stack_.push_back(x);
  }
  void push_tuple(std::vector<PickleRef> items) {
    auto x = pickle_make(PickleValue::Kind::Tuple);
    x->items = std::move(items);
    stack_.push_back(x);
  }
  void memo_get(uint64_t k) {
    auto it = memo_.find(k);
    if (it == memo_.end()) fail("the pickle reads memo entry " + std::to_string(k) + ", never stored: corrupt");
    stack_.push_back(it->second);
  }

  void step(uint8_t op);
  bool scalar_op(uint8_t op);
  void set_items(std::vector<PickleRef> kv);
  void reduce();
  PickleRef persistent_load(const PickleRef& pid);
  PickleRef rebuild_tensor(const std::vector<PickleRef>& args);
  std::vector<int64_t> int_tuple(const PickleRef& v, const char* what);

  std::string path_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  const char* p_;
  const char* end_;
  std::vector<PickleRef> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PickleRef> memo_;
  std::map<std::string, PickleRef> storages_;  // by record key: tensors share them
};

// The opcodes that push one plain value (None, bools, ints, floats, strings); false for any other.
bool StateUnpickler::scalar_op(uint8_t op) {
  using K = PickleValue::Kind;
  switch (op) {
    case 'N': stack_.push_back(pickle_make(K::None)); return true;
    case 0x88: case 0x89: {                        // NEWTRUE, NEWFALSE
      auto b = pickle_make(K::Bool);
      b->i = op == 0x88;
      stack_.push_back(b);
      return true;
    }
    case 'K': push_int(static_cast<int64_t>(uint_le(1))); return true;
    case 'M': push_int(static_cast<int64_t>(uint_le(2))); return true;
    case 'J': push_int(static_cast<int32_t>(uint_le(4))); return true;
    case 0x8a: {                                   // LONG1: n little-endian two's-complement bytes
      const size_t n = byte();
      if (n > 8) fail("an integer of " + std::to_string(n) + " bytes: beyond 64 bits");
      uint64_t v = uint_le(n);
      if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);
      push_int(static_cast<int64_t>(v));
      return true;
    }
    case 'G': {                                    // BINFLOAT: big-endian double
      const char* b = take(8);
      uint64_t bits = 0;
      for (int k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<uint8_t>(b[k]);
      auto x = pickle_make(K::Float);
      std::memcpy(&x->f, &bits, 8);
      stack_.push_back(x);
      return true;
    }
    case 'X': case 'T': push_str(uint_le(4)); return true;   // BINUNICODE, BINSTRING
    case 0x8c: case 'U': push_str(byte()); return true;      // SHORT_BINUNICODE, SHORT_BINSTRING
    case 0x8d: push_str(uint_le(8)); return true;            // BINUNICODE8
    default: return false;
  }
}

void StateUnpickler::step(uint8_t op) {
  using K = PickleValue::Kind;
  if (scalar_op(op)) return;
  switch (op) {
    case 0x80: byte(); return;                     // PROTO
    case 0x95: uint_le(8); return;                 // FRAME: a length hint
    case '(': marks_.push_back(stack_.size()); return;
    case ')': push_tuple({}); return;
    case 0x85: { auto a = pop(); push_tuple({a}); return; }
    case 0x86: { auto b = pop(), a = pop(); push_tuple({a, b}); return; }
    case 0x87: { auto c = pop(), b = pop(), a = pop(); push_tuple({a, b, c}); return; }
    case 't': push_tuple(pop_to_mark()); return;
    case ']': stack_.push_back(pickle_make(K::List)); return;
    case '}': stack_.push_back(pickle_make(K::Dict)); return;
    case 'a': { auto v = pop(); if (top()->kind != K::List) fail("APPEND to a non-list"); top()->items.push_back(v); return; }
    case 'e': {
      auto vs = pop_to_mark();
      if (top()->kind != K::List) fail("APPENDS to a non-list");
      for (auto& v : vs) top()->items.push_back(v);
      return;
    }
    case 's': { auto v = pop(), k = pop(); set_items({k, v}); return; }
    case 'u': set_items(pop_to_mark()); return;
    case 'q': memo_[uint_le(1)] = top(); return;   // BINPUT
    case 'r': memo_[uint_le(4)] = top(); return;   // LONG_BINPUT
    case 0x94: memo_[memo_.size()] = top(); return;  // MEMOIZE
    case 'h': memo_get(uint_le(1)); return;
    case 'j': memo_get(uint_le(4)); return;
    case '0': pop(); return;
    case 'c': {                                    // GLOBAL module\nname\n
      auto g = pickle_make(K::Global);
      const std::string module = line();
      g->s = module + "." + line();
      stack_.push_back(g);
      return;
    }
    case 0x93: {                                   // STACK_GLOBAL (protocol 4): module and name on the stack
      auto name = pop(), module = pop();
      if (module->kind != K::Str || name->kind != K::Str) fail("STACK_GLOBAL of something other than two strings");
      auto g = pickle_make(K::Global);
      g->s = module->s + "." + name->s;
      stack_.push_back(g);
      return;
    }
    case 'R': reduce(); return;
    case 'Q': { auto pid = pop(); stack_.push_back(persistent_load(pid)); return; }
    case 'b': {  // BUILD: an OrderedDict's state is its _metadata (versions), which loading does not need
      pop();
      if (top()->kind != K::Dict) fail("holds an object of a Python class (BUILD): not a plain state_dict");
      return;
    }
    default: {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", op);
      fail(std::string("pickle opcode ") + hex + " is not one a torch.save'd state_dict uses (or the file is corrupt)");
    }
  }
}

void StateUnpickler::set_items(std::vector<PickleRef> kv) {
  if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of values: corrupt");
  auto& d = top();
  if (d->kind != PickleValue::Kind::Dict) fail("SETITEM on a " + std::string(pickle_kind_name(d->kind)) + ": corrupt");
  for (size_t k = 0; k < kv.size(); k += 2) d->dict.emplace_back(kv[k], kv[k + 1]);
}

void StateUnpickler::reduce() {
  auto args = pop(), callable = pop();
  if (callable->kind != PickleValue::Kind::Global || args->kind != PickleValue::Kind::Tuple)
    fail("REDUCE of something that is not a class with arguments: corrupt");
  const std::string& g = callable->s;
  if (g == "collections.OrderedDict") {
    stack_.push_back(pickle_make(PickleValue::Kind::Dict));  // items follow as SETITEMS
  } else if (g == "torch._utils._rebuild_tensor_v2" || g == "torch._utils._rebuild_tensor") {
    stack_.push_back(rebuild_tensor(args->items));
  } else if (g == "torch._utils._rebuild_parameter" && !args->items.empty() &&
             args->items[0]->kind == PickleValue::Kind::Tensor) {
    stack_.push_back(args->items[0]);  // an nn.Parameter saved as such: its data
  } else {
    fail("holds an object of '" + g + "', not a plain state_dict of tensors (save model.state_dict())");
  }
}

// ('storage', torch.FloatStorage, key, location, numel): the bytes of record data/<key>.
PickleRef StateUnpickler::persistent_load(const PickleRef& pid) {
  const auto& t = pid->items;
  if (pid->kind != PickleValue::Kind::Tuple || t.size() != 5 || t[0]->s != "storage" ||
      t[1]->kind != PickleValue::Kind::Global || t[2]->kind != PickleValue::Kind::Str || t[4]->kind != PickleValue::Kind::Int)
    fail("a persistent id that is not a tensor storage: not a torch.save'd state_dict");
  if (auto it = storages_.find(t[2]->s); it != storages_.end()) return it->second;
  const auto dtype = storage_dtype(t[1]->s);
  if (!dtype) fail("storage type '" + t[1]->s + "' is not supported");
  const int64_t numel = t[4]->i;
  const auto elem = static_cast<int64_t>(c10::elementSize(*dtype));
  const std::string record = "data/" + t[2]->s;
  if (!archive_.hasRecord(record)) fail("the archive has no record " + record + " (truncated?)");
  auto [ptr, nbytes] = archive_.getRecord(record);
  if (numel < 0 || numel > static_cast<int64_t>(nbytes) / std::max<int64_t>(elem, 1))
    fail(record + " holds " + std::to_string(nbytes) + " bytes, fewer than its " + std::to_string(numel) + " elements");
  auto s = pickle_make(PickleValue::Kind::Storage);
  s->tensor = torch::empty({numel}, torch::TensorOptions().dtype(*dtype));
  if (numel > 0) std::memcpy(s->tensor.data_ptr(), ptr.get(), static_cast<size_t>(numel * elem));
  storages_[t[2]->s] = s;
  return s;
}

std::vector<int64_t> StateUnpickler::int_tuple(const PickleRef& v, const char* what) {
  if (v->kind != PickleValue::Kind::Tuple) fail(std::string("a tensor's ") + what + " is not a tuple: corrupt");
  std::vector<int64_t> out;
  for (const auto& e : v->items) {
    if (e->kind != PickleValue::Kind::Int || e->i < 0) fail(std::string("a tensor's ") + what + " is not a tuple of sizes");
    out.push_back(e->i);
  }
  return out;
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
PickleRef StateUnpickler::rebuild_tensor(const std::vector<PickleRef>& a) {
  if (a.size() < 4 || a[0]->kind != PickleValue::Kind::Storage || a[1]->kind != PickleValue::Kind::Int)
    fail("a tensor that is not (storage, offset, size, stride): corrupt");
  const auto size = int_tuple(a[2], "size"), stride = int_tuple(a[3], "stride");
  if (size.size() != stride.size()) fail("a tensor whose size and stride differ in length: corrupt");
  const int64_t offset = a[1]->i, numel = a[0]->tensor.numel();
  bool empty = false;
  for (int64_t n : size) empty = empty || n == 0;
  int64_t last = offset;  // the largest element index the view reaches, kept below numel while summing
  for (size_t d = 0; d < size.size() && !empty; ++d) {
    if (stride[d] > (int64_t(1) << 50) / size[d]) fail("a tensor's strides overflow: corrupt");
    last += (size[d] - 1) * stride[d];
    if (last >= numel) break;
  }
  if (offset < 0 || offset > numel || (!empty && last >= numel))
    fail("a tensor reaches beyond its storage (" + std::to_string(numel) + " elements): corrupt");
  auto t = pickle_make(PickleValue::Kind::Tensor);
  t->tensor = a[0]->tensor.as_strided(size, stride, offset);
  return t;
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> read_torch_state_dict(const std::string& path,
                                                                         const std::string& bytes) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> archive;
  std::vector<std::string> records;
  try {
    auto adapter = std::make_shared<caffe2::serialize::MemoryReadAdapter>(bytes.data(), static_cast<off_t>(bytes.size()));
    archive = std::make_unique<caffe2::serialize::PyTorchStreamReader>(adapter);
    records = archive->getAllRecords();
  } catch (const std::exception& e) {
    throw TorchSaveError(path + ": not a readable torch.save zip archive (truncated or corrupt?): " +
                        std::string(e.what()).substr(0, 200));
  }
  for (const auto& r : records)
    if (r == "constants.pkl" || r.rfind("code/", 0) == 0)
      throw TorchSaveError(path + ": a TorchScript archive (torch.jit.save), not a state_dict: save model.state_dict() "
                                 "with torch.save");
  if (!archive->hasRecord("data.pkl")) throw TorchSaveError(path + ": a zip archive without data.pkl: not a torch.save file");
  PickleRef root;
  try {
    auto [ptr, n] = archive->getRecord("data.pkl");
    root = StateUnpickler(path, *archive, static_cast<const char*>(ptr.get()), n).run();
  } catch (const TorchSaveError&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error from a record read: a damaged archive
    throw TorchSaveError(path + ": cannot read the archive: " + std::string(e.what()).substr(0, 200));
  }
  if (root->kind != PickleValue::Kind::Dict)
    throw TorchSaveError(path + ": holds a pickled " + pickle_kind_name(root->kind) +
                        ", not a state_dict (a dict of name -> tensor); save model.state_dict() with torch.save");
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [k, v] : root->dict) {
    if (k->kind != PickleValue::Kind::Str)
      throw TorchSaveError(path + ": a state_dict key is a " + pickle_kind_name(k->kind) + ", not a string");
    if (v->kind != PickleValue::Kind::Tensor)
      throw TorchSaveError(path + ": entry '" + k->s + "' is a " + pickle_kind_name(v->kind) +
                          ", not a tensor: not a plain state_dict (a training checkpoint? save its model's state_dict)");
    out.emplace_back(k->s, v->tensor);
  }
  return out;
}

}  // namespace trainer::io
