// YAML -> RunConfig. The only file (with dump.cpp) that touches yaml-cpp.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/compose.hpp"
#include "config/load.hpp"
#include "config/load_lists.hpp"
#include "config/schema.hpp"

namespace trainer::config {
namespace fs = std::filesystem;

std::string Diagnostic::str() const {
  std::string s = where.file;
  if (where.line > 0) s += ":" + std::to_string(where.line) + ":" + std::to_string(where.col);
  s += ": ";
  if (!key.empty()) s += key + ": ";
  return s + message;
}

namespace {
std::string join_diagnostics(const std::vector<Diagnostic>& ds) {
  std::string s;
  for (const auto& d : ds) {
    if (!s.empty()) s += '\n';
    s += d.str();
  }
  return s;
}
}  // namespace

ConfigError::ConfigError(std::vector<Diagnostic> diagnostics)
    : std::runtime_error(join_diagnostics(diagnostics)), diagnostics_(std::move(diagnostics)) {}

Location LoadedConfig::where(const std::string& key) const {
  auto it = explicit_keys.find(key);
  if (it != explicit_keys.end()) return it->second;
  return Location{source.empty() ? "<config>" : source, 0, 0};
}

namespace {

// Walks the YAML tree against the schema, collecting diagnostics instead of stopping at the first.
class Loader {
 public:
  Loader(RunConfig& cfg, LoadedConfig& out, std::vector<Diagnostic>& diags)
      : fields_(describe_fields(cfg)), out_(out), diags_(diags) {
    for (auto& f : fields_) {
      by_key_[f.key] = &f;
      // every proper prefix of a key is a group ("data", "data.augment")
      for (size_t p = f.key.find('.'); p != std::string::npos; p = f.key.find('.', p + 1))
        groups_.insert(f.key.substr(0, p));
    }
  }

  // `dump`: the document is a file dump_yaml wrote (kDumpHeader): its keys at their default value do
  // not count as set, and its paths are taken as written (the run's own: absolute, or relative to the
  // working directory as a default such as run.out_dir "runs" was), not against the dump's folder.
  void load_document(const YAML::Node& root, const std::string& file, const fs::path& base_dir, bool dump) {
    file_ = file;
    base_dir_ = base_dir;
    dump_ = dump;
    ++source_;
    // an empty file: all defaults; a top level that is not a mapping was refused by compose_documents
    if (!root || !root.IsMap()) return;
    walk_map(root, "");
    if (!dump) return;
    for (auto it = out_.explicit_keys.begin(); it != out_.explicit_keys.end();) {
      const auto f = by_key_.find(it->first);
      const bool unset = it->second.source == source_ && f != by_key_.end() &&
                         value_text(*f->second) == default_text(*f->second);
      it = unset ? out_.explicit_keys.erase(it) : std::next(it);
    }
  }

  static constexpr int kOverrideSource = 1 << 30;  // every --set comes after every document
  std::map<std::string, std::string> set_on_command_line_;  // key -> the --set that set it

  void apply_override(const std::string& text, const fs::path& cwd) {
    file_ = "--set " + printable(text);
    base_dir_ = cwd;
    source_ = kOverrideSource;
    dump_ = false;
    auto eq = text.find('=');
    Location where{file_, 0, 0, source_};
    if (eq == std::string::npos || eq == 0) {
      error(where, "", "expected KEY=VALUE");
      return;
    }
    std::string key = text.substr(0, eq);
    std::string value = text.substr(eq + 1);
    if (auto bad = first_invalid_utf8(key)) {
      error(where, printable(key), not_utf8(key, *bad));
      return;
    }
    // a stray space from a shell line break: "unknown key, did you mean 'optim.lr'?" named the very key
    if (const auto a = key.find_first_not_of(" \t"), b = key.find_last_not_of(" \t");
        a != std::string::npos && (a > 0 || b + 1 < key.size()) && by_key_.count(key.substr(a, b - a + 1))) {
      error(where, key.substr(a, b - a + 1), "the key has a space before or after it ('" + printable(key) +
                                                 "'); write --set KEY=VALUE with nothing around KEY");
      return;
    }
    auto it = by_key_.find(key);
    if (it == by_key_.end() && groups_.count(key)) {  // --set train.ema={decay: 0.999}: one key at a time
      std::string keys;
      for (const auto& f : fields_)
        if (f.key.rfind(key + ".", 0) == 0) keys += (keys.empty() ? "" : ", ") + f.key.substr(key.size() + 1);
      error(where, key, "is a section, not a key: --set takes one key at a time (--set " + key + ".KEY=VALUE; its keys: " +
                            keys + ")");
      return;
    }
    if (it == by_key_.end()) {
      unknown_key(where, key);
      return;
    }
    // the same key twice on one command line: the later one wins, as a later document over an
    // earlier one (scripts append to a base command line), and it is said, since it may be a slip
    if (auto [first, fresh] = set_on_command_line_.emplace(key, file_); !fresh) {
      out_.warnings.push_back(Diagnostic{where, key, "is set twice on the command line (first by " + first->second +
                                                         "): the later value is used"});
      first->second = file_;
    }
    if (value == "~" || value == "null") {  // a base's value removed: the default, as if never set
      reset_to_default(*it->second, where);
      out_.explicit_keys.erase(key);
      return;
    }
    out_.explicit_keys[key] = where;  // "--set KEY=VALUE", after every document
    // a string value is taken verbatim, so "--set run.name=a: b" needs no quoting
    if (it->second->type == FieldType::String || it->second->type == FieldType::Path)
      return assign(*it->second, YAML::Node(value), where);
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(value);
    } catch (const YAML::Exception& e) {
      error(where, key, "cannot parse value '" + printable(value) + "': " + e.msg);
      return;
    }
    if (docs.size() > 1) {
      error(where, key, "the value holds " + std::to_string(docs.size()) + " YAML documents; give one value");
      return;
    }
    assign(*it->second, docs.empty() ? YAML::Node() : docs.front(), where);
  }

 private:
  Location loc(const YAML::Node& n) const {
    const auto m = n.Mark();
    if (m.is_null()) return Location{file_, 0, 0, source_};
    return Location{file_, m.line + 1, m.column + 1, source_};
  }

  void error(const Location& where, const std::string& key, const std::string& msg) {
    diags_.push_back(Diagnostic{where, key, msg});
  }

  void unknown_key(const Location& where, const std::string& key) {
    // suggest among siblings first ("optim.lr_rate" -> "optim.lr"), then among all keys
    auto dot = key.rfind('.');
    std::string parent = dot == std::string::npos ? "" : key.substr(0, dot);
    std::string leaf = dot == std::string::npos ? key : key.substr(dot + 1);
    std::vector<std::string> siblings;
    for (const auto& f : fields_) {
      auto fd = f.key.rfind('.');
      if (f.key.substr(0, fd) == parent) siblings.push_back(f.key.substr(fd + 1));
    }
    for (const auto& g : groups_) {
      auto gd = g.rfind('.');
      std::string gp = gd == std::string::npos ? "" : g.substr(0, gd);
      if (gp == parent) siblings.push_back(gd == std::string::npos ? g : g.substr(gd + 1));
    }
    if (leaf == "<<") {  // yaml-cpp reads a merge key as an ordinary key
      error(where, key, "YAML merge keys (<<) are not supported: write the keys out, or put the shared ones in "
                        "a file named by a top-level `base:` (docs/CONFIG.md)");
      return;
    }
    std::string msg = parent.empty() ? "unknown section" : "unknown key";
    if (parent.empty())  // a key without its section (--set lr=0.1): the key of that name
      for (const auto& f : fields_)
        if (f.key.size() > key.size() && f.key.compare(f.key.size() - key.size() - 1, std::string::npos, "." + key) == 0)
          return error(where, key, msg + ", did you mean '" + f.key + "'?");
    std::string hint = did_you_mean(leaf, siblings);
    if (!hint.empty()) {
      msg += ", did you mean '" + (parent.empty() ? hint : parent + "." + hint) + "'?";
    } else {
      std::vector<std::string> all;
      for (const auto& f : fields_) all.push_back(f.key);
      hint = did_you_mean(key, all);
      if (!hint.empty()) msg += ", did you mean '" + hint + "'?";
      else if (parent.empty()) {
        msg += "; sections are:";
        for (const auto& s : section_names()) msg += " " + s;
      }
    }
    error(where, key, msg);
  }

  void walk_map(const YAML::Node& map, const std::string& prefix) {
    std::map<std::string, int> seen;  // key -> line of first occurrence
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node& knode = it->first;
      const YAML::Node& value = it->second;
      Location where = loc(knode);
      if (!knode.IsScalar()) {
        error(where, prefix, "keys must be plain names");
        continue;
      }
      std::string name = knode.Scalar();
      std::string key = prefix.empty() ? name : prefix + "." + name;
      if (auto bad = first_invalid_utf8(key)) {
        error(where, printable(key), not_utf8(key, *bad));
        continue;
      }
      if (auto [pos, fresh] = seen.emplace(name, where.line); !fresh) {
        error(where, key, "duplicate key (first set at line " + std::to_string(pos->second) + ")");
        continue;
      }
      if (prefix.empty() && name == kBaseKey) continue;  // the file's bases, applied before it (compose.hpp)
      if (auto f = by_key_.find(key); f != by_key_.end()) {
        const auto type = f->second->type;
        // "key: ~", "key: null", "key:": back to the default, as if never set. Strings and paths keep
        // their old reading of nothing, the empty string ("run.name:" is an empty name, refused)
        if (value.IsNull() && type != FieldType::String && type != FieldType::Path) {
          reset_to_default(*f->second, where);
          out_.explicit_keys.erase(key);
          continue;
        }
        out_.explicit_keys[key] = where;
        assign(*f->second, value, loc(value).line ? loc(value) : where);
      } else if (groups_.count(key)) {
        if (value.IsNull()) continue;  // "augment:" with nothing under it
        if (!value.IsMap()) {
          error(loc(value), key, "expected a mapping of keys under '" + key + "'");
          continue;
        }
        walk_map(value, key);
      } else {
        unknown_key(where, key);
      }
    }
  }

  static std::string not_utf8(const std::string& s, size_t at) {
    return "not valid UTF-8 (byte 0" + printable(s.substr(at, 1)).substr(1) + " at offset " + std::to_string(at) +
           " of '" + printable(s) + "'); config text must be UTF-8";
  }

  static std::string shown(const YAML::Node& n) {
    if (n.IsScalar()) return "'" + printable(n.Scalar()) + "'";
    if (n.IsNull()) return "nothing";
    if (n.IsSequence()) return "a list";
    return "a mapping";
  }

  // The schema's default of `f` (a base's value removed): strings and paths as the default holds them
  // (not resolved against this file's folder), the rest through assign from the default's YAML text.
  void reset_to_default(const FieldInfo& f, const Location& where) {
    const FieldInfo& d = default_field(f);
    if (f.type == FieldType::String || f.type == FieldType::Path) {
      *std::get<std::string*>(f.ref) = *std::get<std::string*>(d.ref);
      return;
    }
    const bool dump = dump_;
    dump_ = true;  // as a dump's values are: taken as written
    assign(f, YAML::Load(value_text(d)), where);
    dump_ = dump;
  }

  void assign(const FieldInfo& f, const YAML::Node& n, const Location& where) {
    auto bad = [&](const std::string& expected) { error(where, f.key, "expected " + expected + ", got " + shown(n)); };
    auto range = [&](double v) {
      if (v < f.min || v > f.max) {
        std::ostringstream m;
        m << "value " << number_text(v) << " is out of range [" << number_text(f.min) << ", " << number_text(f.max) << "]";
        if (f.accepts_auto && f.type == FieldType::Int) m << " (or auto)";  // train.batch_size, data.workers, ...
        error(where, f.key, m.str());
        return false;
      }
      return true;
    };
    // a quoted or !!str scalar is a string to YAML (and to PyYAML): "0.05" for a number was taken in
    // silence, where true/false are strict (found from outside)
    const bool quoted = n.IsScalar() && (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str");
    if (quoted && (f.type == FieldType::Int || f.type == FieldType::Float) && n.Scalar() != "auto")
      return error(where, f.key, "expected " + std::string(f.type == FieldType::Int ? "an integer" : "a number") +
                                     ", got the string '" + printable(n.Scalar()) + "' (quoted: write it without quotes)");
    switch (f.type) {
      case FieldType::Bool: {
        bool v;
        if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) return bad("true or false");
        *std::get<bool*>(f.ref) = v;
        return;
      }
      case FieldType::Int: {
        int64_t v;
        if (f.accepts_auto && n.IsScalar() && n.Scalar() == "auto") {
          *std::get<int64_t*>(f.ref) = f.auto_value;
          return;
        }
        if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) return bad(f.accepts_auto ? "an integer or auto" : "an integer");
        if (leading_zero_integer(n.Scalar()))  // yaml-cpp reads 010 as YAML 1.1's octal 8, YAML 1.2 as 10
          return bad("an integer without a leading 0 (YAML 1.1 reads 010 as octal 8, YAML 1.2 as 10: write 10 or 8)");
        if (range(static_cast<double>(v))) *std::get<int64_t*>(f.ref) = v;
        return;
      }
      case FieldType::Float: {
        double v;
        int64_t whole;  // an integer YAML writes otherwise (0x10, 0o7) is a number as the integer keys read it
        if (n.IsScalar() && !YAML::convert<double>::decode(n, v) && YAML::convert<int64_t>::decode(n, whole))
          v = static_cast<double>(whole);
        else if (!n.IsScalar() || !YAML::convert<double>::decode(n, v)) return bad("a number");
        if (!std::isfinite(v)) return bad("a finite number");
        if (underflows_to_zero(n.Scalar(), v)) return bad("a number a double holds (it is below 1e-308, so it reads as 0)");
        if (range(v)) *std::get<double*>(f.ref) = v;
        return;
      }
      case FieldType::String:
      case FieldType::Path: {
        if (n.IsNull()) {  // "init_from:" with nothing = empty
          *std::get<std::string*>(f.ref) = "";
          return;
        }
        if (!n.IsScalar()) return bad("a string");
        std::string v = n.Scalar();
        // strings end up in JSON (checkpoint metadata, metrics), which holds only UTF-8
        if (auto at = first_invalid_utf8(v)) return error(where, f.key, not_utf8(v, *at));
        // a path ends at its first NUL for the system: "a.yaml\0x" opened a.yaml, a folder "x\0/y" named x
        if (f.type == FieldType::Path && v.find('\0') != std::string::npos)
          return error(where, f.key, "'" + printable(v) + "' holds a NUL character, which no path can hold");
        if (f.type == FieldType::Path && !dump_ && !v.empty() && v.find("://") == std::string::npos &&
            fs::path(v).is_relative())
          v = (base_dir_ / v).lexically_normal().string();
        if (auto at = first_invalid_utf8(v))
          return error(where, f.key, "resolves to '" + printable(v) + "', which is not valid UTF-8 (the folder it is "
                                     "relative to has a byte 0" + printable(v.substr(*at, 1)).substr(1) +
                                     " in its name); use an absolute path");
        *std::get<std::string*>(f.ref) = v;
        return;
      }
      case FieldType::Choice: {
        std::string v = n.IsNull() ? "" : (n.IsScalar() ? n.Scalar() : "\x01");
        if (v == "\x01") return bad("one of " + type_name(f));
        if (auto at = first_invalid_utf8(v)) return error(where, f.key, not_utf8(v, *at));
        for (size_t i = 0; i < f.choices.size(); ++i)
          if (f.choices[i] == v) {
            if (const auto* e = std::get_if<EnumRef>(&f.ref)) e->set(i);
            else *std::get<std::string*>(f.ref) = v;
            return;
          }
        std::string msg = "'" + printable(v) + "' is not one of " + type_name(f);
        std::string hint = did_you_mean(v, f.choices);
        if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
        error(where, f.key, msg);
        return;
      }
      case FieldType::FloatList: {
        if (!n.IsSequence()) return bad("a list of numbers such as [0.5, 0.5]");
        std::vector<double> v;
        for (const auto& e : n) {  // the element at fault named ("expected a list of numbers, got a list")
          double x;
          const std::string which = "element " + std::to_string(v.size() + 1) + " of the list is ";
          if (!e.IsScalar() || !YAML::convert<double>::decode(e, x))
            return error(where, f.key, "expected a list of numbers; " + which + shown(e));
          if (!std::isfinite(x)) return error(where, f.key, "expected a list of finite numbers; " + which + shown(e));
          if (underflows_to_zero(e.Scalar(), x))
            return error(where, f.key, "expected a list of numbers a double holds; " + which + shown(e) +
                                           ", below 1e-308");
          v.push_back(x);
        }
        *std::get<std::vector<double>*>(f.ref) = v;
        return;
      }
      case FieldType::StringList:
      case FieldType::PrefixMap:
      case FieldType::GroupList: return assign_collection(f, n, where, file_, diags_);  // load_lists.cpp
    }
  }

  std::vector<FieldInfo> fields_;
  std::map<std::string, const FieldInfo*> by_key_;
  std::set<std::string> groups_;
  LoadedConfig& out_;
  std::vector<Diagnostic>& diags_;
  std::string file_;
  fs::path base_dir_;
  int source_ = 0;
  bool dump_ = false;
};

std::string location_text(const Location& l) {
  return l.line > 0 ? l.file + ":" + std::to_string(l.line) + ":" + std::to_string(l.col) : l.file;
}

// The run's length and its warmup, settled before validation. train.max_steps and train.epochs set in
// different documents (a base and the file, a file and --set): the later one sizes the run and the
// other becomes 0 (set in the same one they contradict: validate says so). A warmup longer than
// train.max_steps is kept as written (a resume that makes the run longer changes no key) and the
// schedule ends it with the run (engine/optim/schedule). Both are said in out.warnings.
void settle_run_length(LoadedConfig& out) {
  auto& t = out.cfg.train;
  if (t.max_steps > 0 && t.epochs > 0 && out.is_set("train.max_steps") && out.is_set("train.epochs")) {
    const Location steps = out.where("train.max_steps"), epochs = out.where("train.epochs");
    if (steps.source != epochs.source) {
      std::ostringstream m;
      if (steps.source > epochs.source) {
        m << "sizes the run (" << t.max_steps << " steps): train.epochs " << t.epochs << " ("
          << location_text(epochs) << ") is replaced by 0";
        out.warnings.push_back(Diagnostic{steps, "train.max_steps", m.str()});
        t.epochs = 0;
      } else {
        m << "sizes the run (" << t.epochs << " epochs): train.max_steps " << t.max_steps << " ("
          << location_text(steps) << ") is replaced by 0";
        out.warnings.push_back(Diagnostic{epochs, "train.epochs", m.str()});
        t.max_steps = 0;
      }
    }
  }
  const int64_t warmup = out.cfg.schedule.warmup_steps;
  if (t.max_steps > 0 && warmup > t.max_steps) {
    out.warnings.push_back(Diagnostic{out.where("schedule.warmup_steps"), "schedule.warmup_steps",
                                      std::to_string(warmup) + " is longer than the run (" +
                                          std::to_string(t.max_steps) + " steps): the schedule clips it to " +
                                          std::to_string(t.max_steps)});
  }
}

// `parsed` tells whether every document of the chain was read (no syntax error, one document each,
// every base found): cross-field checks of a config that was not read would only add noise.
LoadedConfig load_impl(const std::string& text, const std::string& name, const std::vector<std::string>& overrides,
                       const fs::path& base_dir, std::vector<Diagnostic>& diags, bool& parsed) {
  LoadedConfig out;
  out.source = name;
  Loader loader(out.cfg, out, diags);
  // bases first, the file last: each document writes its keys over the ones before (compose.hpp)
  const bool dump = text.rfind(kDumpHeader, 0) == 0;  // the file itself (not its bases) is a dump
  for (const auto& doc : compose_documents(text, name, base_dir, diags, parsed)) {
    if (!doc.chain.empty()) out.bases.push_back(doc.file);
    loader.load_document(doc.root, doc.file, doc.dir, dump && doc.chain.empty());
  }
  std::error_code ec;
  fs::path cwd = fs::current_path(ec);
  for (const auto& o : overrides) loader.apply_override(o, cwd);
  settle_run_length(out);
  note_unused_options(out);
  return out;
}

}  // namespace

LoadedConfig load_config_text(const std::string& text, const std::string& name,
                              const std::vector<std::string>& overrides, const std::string& base_dir) {
  std::vector<Diagnostic> diags;
  bool parsed = false;
  LoadedConfig out = load_impl(text, name, overrides, fs::path(base_dir), diags, parsed);
  if (!diags.empty()) throw ConfigError(std::move(diags));
  return out;
}

LoadedConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  fs::path base;
  std::string text = read_config_file(path, base);
  return load_config_text(text, path, overrides, base.string());
}

LoadedConfig load_and_validate(const std::string& path, const std::vector<std::string>& overrides,
                               const ValidateOptions& opts) {
  fs::path base;
  std::string text = read_config_file(path, base);
  std::vector<Diagnostic> diags;
  bool parsed = false;
  LoadedConfig out = load_impl(text, path, overrides, base, diags, parsed);
  // Cross-field checks run even when some keys failed to load, so one pass reports everything;
  // a key that already has a load error gets no second, derived complaint.
  std::set<std::string> bad_keys;
  for (const auto& d : diags) bad_keys.insert(d.key);
  if (parsed) {
    try {
      validate(out, opts);
    } catch (const ConfigError& e) {
      for (const auto& d : e.diagnostics())
        if (!bad_keys.count(d.key)) diags.push_back(d);
    }
  }
  if (!diags.empty()) throw ConfigError(std::move(diags));
  resolve(out.cfg, opts.world_size);
  return out;
}

}  // namespace trainer::config
