// The state_dict of a torch.save zip archive, unpickled here rather than by torch::pickle_load:
// LibTorch 2.11's unpickler turns collections.OrderedDict (what model.state_dict() is) into None, so
// a real state_dict cannot be read through it. This reader knows the opcodes of pickle protocols 2-4
// that torch.save writes for a dict of tensors (and plain Python values around them), rebuilds
// tensors from the archive's data/<key> records, and refuses anything else (classes, modules,
// TorchScript) with a message. Every read is bounds-checked: a hostile file is an error.
// Values live in an arena, linked by plain pointers: freeing 100,000 nested lists is one pass (a
// shared_ptr tree frees itself recursively, overflowing the stack); a cycle through the memo is
// harmless. Object count and nesting are bounded; protocol, FRAMEs, storage records, locations and
// each tensor's view of its storage are checked as torch.load does, or more strictly (RELIABILITY.md).
#include "io/torch_pickle.hpp"

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <deque>
#include <map>
#include <memory>

namespace trainer::io {
namespace {

struct PickleValue;
using PickleRef = PickleValue*;  // owned by StateUnpickler::arena_

// Far beyond any state_dict (a few objects per tensor), far below what would exhaust memory.
constexpr size_t kPickleMaxObjects = size_t(1) << 20;
constexpr int kPickleMaxDepth = 1000;  // containers within containers; a state_dict nests 4 deep

struct PickleArray {                  // what a Storage or Tensor value adds (most values are neither)
  torch::ScalarType dtype = torch::kFloat;  // Storage
  std::string location, global;             // Storage: "cpu" / "cuda:0"; "torch.FloatStorage"
  PickleRef storage = nullptr;              // Tensor
  std::vector<int64_t> size, stride;        // Tensor
};

struct PickleValue {
  enum class Kind { None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Storage, Tensor } kind = Kind::None;
  int64_t i = 0;
  double f = 0;
  std::string s;                                  // Str; Global: "module.name"
  std::vector<PickleRef> items;                   // Tuple, List
  std::vector<std::pair<PickleRef, PickleRef>> dict;
  // Storage: s = record key, i = element count, x; Tensor: i = storage offset, x
  std::unique_ptr<struct PickleArray> x;
  int depth = 0;                                  // containers below this one (a lower bound with memo aliasing)
};

const char* pickle_kind_name(PickleValue::Kind k) {
  static const char* names[] = {"None", "bool", "int", "float", "str", "tuple", "list", "dict", "class", "storage", "tensor"};
  return names[static_cast<int>(k)];
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
  StateUnpickler(const std::string& path, const char* data, size_t size) : path_(path), p_(data), end_(data + size) {}

  PickleRef run() {
    // torch.save writes protocol 2 (or the one asked for, up to 5) and always says so first
    if (p_ == end_ || static_cast<uint8_t>(*p_) != 0x80)
      fail("the pickle (data.pkl) does not start with PROTO: not written by torch.save (or corrupt)");
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
  PickleRef make(PickleValue::Kind k) {
    if (arena_.size() >= kPickleMaxObjects)
      fail("the pickle builds more than " + std::to_string(kPickleMaxObjects) + " objects: not a state_dict");
    arena_.emplace_back();
    arena_.back().kind = k;
    if (k == PickleValue::Kind::Storage || k == PickleValue::Kind::Tensor) arena_.back().x = std::make_unique<PickleArray>();
    return &arena_.back();
  }
  // `child` goes into the container `parent`: the nesting depth is bounded here, as it is built
  void nest(PickleValue& parent, const PickleValue& child) {
    parent.depth = std::max(parent.depth, child.depth + 1);
    if (parent.depth > kPickleMaxDepth)
      fail("the pickle nests containers more than " + std::to_string(kPickleMaxDepth) + " deep: not a state_dict");
  }
  void push(PickleRef v) {
    if (stack_.size() >= kPickleMaxObjects) fail("the pickle's stack grows beyond " + std::to_string(kPickleMaxObjects));
    stack_.push_back(v);
  }
  void memo_put(uint64_t k) {
    if (memo_.size() >= kPickleMaxObjects) fail("the pickle's memo grows beyond " + std::to_string(kPickleMaxObjects));
    memo_[k] = top();
  }

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
    auto x = make(PickleValue::Kind::Int);
    x->i = v;
    push(x);
  }
  void push_str(size_t n) {
    auto x = make(PickleValue::Kind::Str);
    x->s.assign(take(n), n);
    push(x);
  }
  void push_tuple(std::vector<PickleRef> items) {
    auto x = make(PickleValue::Kind::Tuple);
    for (const auto* e : items) nest(*x, *e);
    x->items = std::move(items);
    push(x);
  }
  void memo_get(uint64_t k) {
    auto it = memo_.find(k);
    if (it == memo_.end()) fail("the pickle reads memo entry " + std::to_string(k) + ", never stored: corrupt");
    push(it->second);
  }
  void mark() {
    if (marks_.size() >= static_cast<size_t>(kPickleMaxDepth))
      fail("the pickle nests more than " + std::to_string(kPickleMaxDepth) + " MARKs: not a state_dict");
    marks_.push_back(stack_.size());
  }
  void proto();
  void frame();
  void step(uint8_t op);
  bool scalar_op(uint8_t op);
  void set_items(std::vector<PickleRef> kv);
  void reduce();
  PickleRef persistent_load(const PickleRef& pid);
  PickleRef rebuild_tensor(const std::vector<PickleRef>& args);
  std::vector<int64_t> int_tuple(const PickleRef& v, const char* what);

  std::string path_;
  std::deque<PickleValue> arena_;  // every value; a deque never moves what it holds
  const char* p_;
  const char* end_;
  std::vector<PickleRef> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PickleRef> memo_;
  std::map<std::string, PickleRef> storages_;  // by record key: tensors share them
  bool proto_seen_ = false;
};

// PROTO n: only as the first opcode, and only a protocol torch.save can write (2 to 5).
void StateUnpickler::proto() {
  const int v = byte();
  if (proto_seen_) fail("a second PROTO opcode inside the pickle: corrupt");
  proto_seen_ = true;
  if (v < 2 || v > 5) fail("pickle protocol " + std::to_string(v) + ": torch.save writes protocols 2 to 5 (corrupt?)");
}

// FRAME n (protocol 4+): a length beyond the stream is a lie Python refuses too ("pickle exhausted").
void StateUnpickler::frame() {
  const uint64_t n = uint_le(8);
  if (n > static_cast<uint64_t>(end_ - p_))
    fail("a FRAME of " + std::to_string(n) + " bytes where " + std::to_string(end_ - p_) +
         " remain in the pickle: truncated or corrupt");
}

// The opcodes that push one plain value (None, bools, ints, floats, strings); false for any other.
bool StateUnpickler::scalar_op(uint8_t op) {
  using K = PickleValue::Kind;
  switch (op) {
    case 'N': push(make(K::None)); return true;
    case 0x88: case 0x89: {                        // NEWTRUE, NEWFALSE
      auto b = make(K::Bool);
      b->i = op == 0x88;
      push(b);
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
      auto x = make(K::Float);
      std::memcpy(&x->f, &bits, 8);
      push(x);
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
    case 0x80: proto(); return;
    case 0x95: frame(); return;
    case '(': mark(); return;
    case ')': push_tuple({}); return;
    case 0x85: { auto a = pop(); push_tuple({a}); return; }
    case 0x86: { auto b = pop(), a = pop(); push_tuple({a, b}); return; }
    case 0x87: { auto c = pop(), b = pop(), a = pop(); push_tuple({a, b, c}); return; }
    case 't': push_tuple(pop_to_mark()); return;
    case ']': push(make(K::List)); return;
    case '}': push(make(K::Dict)); return;
    case 'a': { auto v = pop(); if (top()->kind != K::List) fail("APPEND to a non-list"); nest(*top(), *v); top()->items.push_back(v); return; }
    case 'e': {
      auto vs = pop_to_mark();
      if (top()->kind != K::List) fail("APPENDS to a non-list");
      for (auto& v : vs) nest(*top(), *v), top()->items.push_back(v);
      return;
    }
    case 's': { auto v = pop(), k = pop(); set_items({k, v}); return; }
    case 'u': set_items(pop_to_mark()); return;
    case 'q': memo_put(uint_le(1)); return;      // BINPUT
    case 'r': memo_put(uint_le(4)); return;      // LONG_BINPUT
    case 0x94: memo_put(memo_.size()); return;   // MEMOIZE
    case 'h': memo_get(uint_le(1)); return;
    case 'j': memo_get(uint_le(4)); return;
    case '0': pop(); return;
    case 'c': {                                    // GLOBAL module\nname\n
      auto g = make(K::Global);
      const std::string module = line();
      g->s = module + "." + line();
      push(g);
      return;
    }
    case 0x93: {                                   // STACK_GLOBAL (protocol 4): module and name on the stack
      auto name = pop(), module = pop();
      if (module->kind != K::Str || name->kind != K::Str) fail("STACK_GLOBAL of something other than two strings");
      auto g = make(K::Global);
      g->s = module->s + "." + name->s;
      push(g);
      return;
    }
    case 'R': reduce(); return;
    case 'Q': { auto pid = pop(); push(persistent_load(pid)); return; }
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
  for (size_t k = 0; k < kv.size(); k += 2) nest(*d, *kv[k]), nest(*d, *kv[k + 1]), d->dict.emplace_back(kv[k], kv[k + 1]);
}

void StateUnpickler::reduce() {
  auto args = pop(), callable = pop();
  if (callable->kind != PickleValue::Kind::Global || args->kind != PickleValue::Kind::Tuple)
    fail("REDUCE of something that is not a class with arguments: corrupt");
  const std::string& g = callable->s;
  if (g == "collections.OrderedDict") {
    push(make(PickleValue::Kind::Dict));  // items follow as SETITEMS
  } else if (g == "torch._utils._rebuild_tensor_v2" || g == "torch._utils._rebuild_tensor") {
    push(rebuild_tensor(args->items));
  } else if (g == "torch._utils._rebuild_parameter" && !args->items.empty() &&
             args->items[0]->kind == PickleValue::Kind::Tensor) {
    push(args->items[0]);  // an nn.Parameter saved as such: its data
  } else {
    fail("holds an object of '" + g + "', not a plain state_dict of tensors (save model.state_dict())");
  }
}

// ('storage', torch.FloatStorage, key, location, numel): read and checked when a tensor of the
// state_dict uses it (StateTensors), so that errors name the tensor.
PickleRef StateUnpickler::persistent_load(const PickleRef& pid) {
  const auto& t = pid->items;
  if (pid->kind != PickleValue::Kind::Tuple || t.size() != 5 || t[0]->s != "storage" ||
      t[1]->kind != PickleValue::Kind::Global || t[2]->kind != PickleValue::Kind::Str ||
      t[3]->kind != PickleValue::Kind::Str || t[4]->kind != PickleValue::Kind::Int)
    fail("a persistent id that is not a tensor storage: not a torch.save'd state_dict");
  if (auto it = storages_.find(t[2]->s); it != storages_.end()) return it->second;
  const auto dtype = storage_dtype(t[1]->s);
  if (!dtype) fail("storage type '" + t[1]->s + "' is not supported");
  if (t[4]->i < 0) fail("a storage of " + std::to_string(t[4]->i) + " elements: corrupt");
  auto s = make(PickleValue::Kind::Storage);
  s->x->dtype = *dtype;
  s->s = t[2]->s;
  s->i = t[4]->i;
  s->x->location = t[3]->s;
  s->x->global = t[1]->s;
  storages_[t[2]->s] = s;
  return s;
}

std::vector<int64_t> StateUnpickler::int_tuple(const PickleRef& v, const char* what) {
  if (v->kind != PickleValue::Kind::Tuple) fail(std::string("a tensor's ") + what + " is not a tuple: corrupt");
  if (v->items.size() > 64) fail(std::string("a tensor's ") + what + " has more than 64 dimensions: corrupt");
  std::vector<int64_t> out;
  for (const auto& e : v->items) {
    if (e->kind != PickleValue::Kind::Int || e->i < 0) fail(std::string("a tensor's ") + what + " is not a tuple of sizes");
    out.push_back(e->i);
  }
  return out;
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]):
// the view is checked against its storage when the tensor's name is known (StateTensors::view).
PickleRef StateUnpickler::rebuild_tensor(const std::vector<PickleRef>& a) {
  if (a.size() < 4 || a[0]->kind != PickleValue::Kind::Storage || a[1]->kind != PickleValue::Kind::Int)
    fail("a tensor that is not (storage, offset, size, stride): corrupt");
  auto t = make(PickleValue::Kind::Tensor);
  t->i = a[1]->i;
  t->x->storage = a[0];
  t->x->size = int_tuple(a[2], "size");
  t->x->stride = int_tuple(a[3], "stride");
  return t;
}

// The state_dict's tensors, each checked before it exists: its record holds exactly what the storage
// type says (as torch.load checks), the location is a device (ignored: we place tensors), the view
// stays inside its storage and no two elements share a stored value (stride 0, overlapping strides).
class StateTensors {
 public:
  StateTensors(const std::string& path, caffe2::serialize::PyTorchStreamReader& archive)
      : path_(path), archive_(archive) {}

  torch::Tensor view(const std::string& name, const PickleValue& v) {
    const PickleArray& t = *v.x;
    const torch::Tensor& storage = materialise(name, *t.storage);
    const int64_t numel = storage.numel(), offset = v.i;
    if (t.size.size() != t.stride.size()) fail(name, "its size and stride differ in length: corrupt");
    if (offset < 0 || offset > numel)
      fail(name, "storage offset " + std::to_string(offset) + " outside its storage of " + std::to_string(numel) + " elements");
    std::vector<size_t> dims;  // the dimensions that matter: those over more than one element
    for (size_t d = 0; d < t.size.size(); ++d) {
      if (t.size[d] == 0) return storage.as_strided(t.size, t.stride, offset);  // no elements: nothing to reach
      if (t.size[d] > 1) dims.push_back(d);
    }
    std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return t.stride[a] < t.stride[b]; });
    int64_t span = 0;  // the largest index offset reached by the dimensions taken so far
    for (size_t d : dims) {
      const int64_t n = t.size[d], s = t.stride[d];
      if (s == 0)
        fail(name, "stride 0 in dimension " + std::to_string(d) + ": one stored value is broadcast over " +
                       std::to_string(n) + " places (an expanded tensor); save a contiguous copy (.contiguous())");
      if (s <= span)
        fail(name, "strides that overlap (dimension " + std::to_string(d) + ", stride " + std::to_string(s) +
                       "): several elements share one stored value");
      if (s > (int64_t(1) << 50) / (n - 1) || span > (int64_t(1) << 52)) fail(name, "its strides overflow: corrupt");
      span += (n - 1) * s;
    }
    if (offset + span >= numel)
      fail(name, "the view (offset " + std::to_string(offset) + ", reaching element " + std::to_string(offset + span) +
                     ") goes beyond its storage of " + std::to_string(numel) + " elements");
    return storage.as_strided(t.size, t.stride, offset);
  }

 private:
  [[noreturn]] void fail(const std::string& name, const std::string& why) const {
    throw TorchSaveError(path_ + ": tensor '" + name + "': " + why);
  }

  const torch::Tensor& materialise(const std::string& name, const PickleValue& v) {
    if (auto it = made_.find(v.s); it != made_.end()) return it->second;
    const PickleArray& s = *v.x;
    try {
      (void)c10::Device(s.location);  // "cpu", "cuda:7", ...: any device, since we choose where tensors go
    } catch (const std::exception&) {
      fail(name, "its storage's location '" + s.location.substr(0, 64) + "' is not a device (cpu, cuda:N, ...): corrupt");
    }
    const std::string record = "data/" + v.s;
    if (!archive_.hasRecord(record)) fail(name, "the archive has no record " + record + " (truncated?)");
    auto [ptr, nbytes] = archive_.getRecord(record);
    const auto elem = static_cast<uint64_t>(c10::elementSize(s.dtype));
    const auto numel = static_cast<uint64_t>(v.i);
    if (numel > nbytes / elem || numel * elem != nbytes)
      fail(name, record + " holds " + std::to_string(nbytes) + " bytes, but its storage type " + s.global + " of " +
                     std::to_string(numel) + " elements needs " + std::to_string(numel * elem) +
                     " bytes: the storage type does not match its data (or the record is damaged)");
    auto t = torch::empty({v.i}, torch::TensorOptions().dtype(s.dtype));
    if (nbytes > 0) std::memcpy(t.data_ptr(), ptr.get(), nbytes);
    return made_.emplace(v.s, std::move(t)).first->second;
  }

  const std::string& path_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  std::map<std::string, torch::Tensor> made_;  // by record key: tensors share storages
};

std::vector<std::pair<std::string, torch::Tensor>> state_entries(const std::string& path,
                                                                 caffe2::serialize::PyTorchStreamReader& archive,
                                                                 const PickleValue* root) {
  if (root->kind != PickleValue::Kind::Dict)
    throw TorchSaveError(path + ": holds a pickled " + pickle_kind_name(root->kind) +
                        ", not a state_dict (a dict of name -> tensor); save model.state_dict() with torch.save");
  StateTensors tensors(path, archive);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [k, v] : root->dict) {
    if (k->kind != PickleValue::Kind::Str)
      throw TorchSaveError(path + ": a state_dict key is a " + pickle_kind_name(k->kind) + ", not a string");
    if (v->kind != PickleValue::Kind::Tensor)
      throw TorchSaveError(path + ": entry '" + k->s + "' is a " + pickle_kind_name(v->kind) +
                          ", not a tensor: not a plain state_dict (a training checkpoint? save its model's state_dict)");
    out.emplace_back(k->s, tensors.view(k->s, *v));
  }
  return out;
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
  try {
    auto [ptr, n] = archive->getRecord("data.pkl");
    StateUnpickler unpickler(path, static_cast<const char*>(ptr.get()), n);
    return state_entries(path, *archive, unpickler.run());  // the unpickler owns the values: still alive
  } catch (const TorchSaveError&) {
    throw;
  } catch (const std::exception& e) {  // c10::Error from a record read: a damaged archive
    throw TorchSaveError(path + ": cannot read the archive: " + std::string(e.what()).substr(0, 200));
  }
}

}  // namespace trainer::io
