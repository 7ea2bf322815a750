// Reading config files into YAML documents, and following their `base:` chains (compose.hpp).
#include "config/compose.hpp"

#include <set>
#include <sstream>

#include "config/file_read.hpp"

namespace trainer::config {
namespace fs = std::filesystem;
namespace {

// A chain longer than this is refused: no real config nests so deep, and a generated one that does
// would make every error message unreadable.
constexpr size_t kComposeMaxDepth = 32;
// Distinct files in one composition: each is read once however many bases name it, so this bounds
// the work of any base graph (a "diamond ladder" naming each level twice would otherwise read 2^N).
constexpr size_t kComposeMaxFiles = 256;

// Where the second document starts: its first node, or when it is empty, the second '---' line
// (the first one when the first document has no marker).
Location second_document_at(const std::string& text, const YAML::Node& second, const std::string& name) {
  const auto m = second.Mark();
  if (!m.is_null() && !second.IsNull()) return Location{name, m.line + 1, m.column + 1};
  std::istringstream in(text);
  std::string line;
  std::vector<int> markers;
  bool content_before = false;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind("---", 0) == 0 && (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r')) {
      if (markers.empty() && content_before) return Location{name, n, 1};
      markers.push_back(n);
      if (markers.size() == 2) return Location{name, n, 1};
    } else if (line.find_first_not_of(" \t\r") != std::string::npos && line[line.find_first_not_of(" \t\r")] != '#') {
      content_before = true;
    }
  }
  return Location{name, 0, 0};
}

Location compose_loc(const YAML::Node& n, const std::string& file) {
  const auto m = n.Mark();
  if (m.is_null()) return Location{file, 0, 0};
  return Location{file, m.line + 1, m.column + 1};
}

std::string chain_text(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : " -> ") + n;
  return s;
}

class Composer {
 public:
  Composer(std::vector<Diagnostic>& diags, bool& parsed) : diags_(diags), parsed_(parsed) {}

  // `text` is the file `name` in `dir`; its bases are applied before it.
  void add(const std::string& text, const std::string& name, const fs::path& dir) {
    const std::string via = names_.size() > 1 ? " (base chain: " + chain_text(names_) + ")" : "";
    YAML::Node root;
    if (!parse(text, name, via, root)) return;
    if (root && !root.IsNull() && !root.IsMap()) {
      fail(compose_loc(root, name), "", "the top level must be a mapping of sections (run:, model:, data:, ...)" + via);
      return;
    }
    if (root && root.IsMap())
      for (auto it = root.begin(); it != root.end(); ++it)
        if (it->first.IsScalar() && it->first.Scalar() == kBaseKey) {
          add_bases(it->second, name, dir);
          break;  // a second `base:` is the Loader's duplicate-key error
        }
    docs_.push_back(ConfigDocument{root, name, dir, names_.size() > 1 ? chain_text(names_) : ""});
  }

  void start(const std::string& name, const fs::path& dir) {
    names_ = {name};
    std::error_code ec;
    canonical_ = {fs::weakly_canonical(dir / fs::path(name).filename(), ec).string()};
    applied_ = {canonical_.front()};
  }

  std::vector<ConfigDocument> take() { return std::move(docs_); }

 private:
  void fail(const Location& where, const std::string& key, const std::string& msg) {
    diags_.push_back(Diagnostic{where, key, msg});
    parsed_ = false;
  }

  bool parse(const std::string& text, const std::string& name, const std::string& via, YAML::Node& root) {
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::ParserException& e) {
      // a tab where YAML wants spaces reads as "illegal map value" or the like: say so
      std::string line;
      {
        std::istringstream in(text);
        for (int i = 0; i <= e.mark.line && std::getline(in, line); ++i) {}
      }
      const bool tab = e.mark.line >= 0 && line.find('\t') != std::string::npos;
      fail(Location{name, e.mark.line + 1, e.mark.column + 1}, "",
           "YAML syntax error: " + e.msg + (tab ? " (the line holds a tab: YAML indents with spaces only)" : "") + via);
      return false;
    }
    if (docs.size() > 1) {
      // one file is one experiment: a second document would otherwise be dropped without a word
      fail(second_document_at(text, docs[1], name), "",
           "the file holds " + std::to_string(docs.size()) +
               " YAML documents (separated by '---'); a config is one document" + via);
      return false;
    }
    root = docs.empty() ? YAML::Node() : docs.front();
    return true;
  }

  void add_bases(const YAML::Node& value, const std::string& name, const fs::path& dir) {
    if (value.IsNull()) return;  // "base:" with nothing: no bases
    std::vector<YAML::Node> entries;
    if (value.IsScalar()) entries.push_back(value);
    else if (value.IsSequence())
      for (const auto& e : value) entries.push_back(e);
    else
      return fail(compose_loc(value, name), kBaseKey, "expected a file name or a list of file names, got a mapping");
    for (const auto& e : entries) add_base(e, name, dir);
  }

  void add_base(const YAML::Node& entry, const std::string& name, const fs::path& dir) {
    const Location where = compose_loc(entry, name);
    if (!entry.IsScalar() || entry.Scalar().empty())
      return fail(where, kBaseKey, "expected a file name (relative to " + name + "'s folder)");
    const std::string& v = entry.Scalar();
    if (auto bad = first_invalid_utf8(v)) return fail(where, kBaseKey, "'" + printable(v) + "' is not valid UTF-8");
    if (v.find('\0') != std::string::npos)  // the system reads a path up to its first NUL: another file
      return fail(where, kBaseKey, "'" + printable(v) + "' holds a NUL character, which no path can hold");
    const fs::path p = fs::path(v).is_absolute() ? fs::path(v) : dir / v;
    // messages name a base as the user would reach it from where the first file was named
    const std::string shown =
        fs::path(v).is_absolute() ? v : (fs::path(name).parent_path() / v).lexically_normal().string();
    std::error_code ec;
    const std::string canon = fs::weakly_canonical(p, ec).string();
    std::vector<std::string> chain = names_;
    chain.push_back(shown);
    for (const auto& c : canonical_)
      if (c == canon) return fail(where, kBaseKey, "'" + v + "' makes a cycle of bases: " + chain_text(chain));
    if (names_.size() >= kComposeMaxDepth)
      return fail(where, kBaseKey, "more than " + std::to_string(kComposeMaxDepth) + " nested bases: " + chain_text(chain));
    // A file already applied (a diamond: two bases sharing one) is not applied again: its values are
    // already there, at their first place in the order, and reading it twice is what made a base
    // graph cost exponential time.
    if (applied_.count(canon) || capped_) return;
    if (applied_.size() >= kComposeMaxFiles) {
      capped_ = true;  // one error, not one per file beyond the cap
      return fail(where, kBaseKey, "more than " + std::to_string(kComposeMaxFiles) +
                                       " distinct files in the base graph: " + chain_text(chain));
    }
    applied_.insert(canon);
    std::string text;
    fs::path base_dir;
    try {
      text = read_config_file(p.string(), base_dir);
    } catch (const ConfigError& e) {
      const std::string why = e.diagnostics().empty() ? e.what() : e.diagnostics().front().message;
      return fail(where, kBaseKey, shown + ": " + why + " (base chain: " + chain_text(chain) + ")");
    }
    names_.push_back(shown);
    canonical_.push_back(canon);
    add(text, shown, base_dir);
    names_.pop_back();
    canonical_.pop_back();
  }

  std::vector<Diagnostic>& diags_;
  bool& parsed_;
  std::vector<ConfigDocument> docs_;
  std::vector<std::string> names_;      // the chain from the first file to the one being read
  std::vector<std::string> canonical_;  // the same files, canonical: what a cycle is detected on
  std::set<std::string> applied_;       // every file read so far, canonical: each is read once
  bool capped_ = false;                 // kComposeMaxFiles reached (and reported)
};

}  // namespace

std::string read_config_file(const std::string& path, fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw ConfigError({Diagnostic{Location{path, 0, 0}, "", "config file not found"}});
  if (fs::is_directory(path, ec))
    throw ConfigError({Diagnostic{Location{path, 0, 0}, "", "is a folder, expected a YAML file"}});
  // a FIFO or device is refused (it could block or never end), and so is a "config" over 16 MiB
  std::string text;
  try {
    text = RegularFile::open(path, 16u << 20, "a config file").read_all();
  } catch (const FileReadError& e) {
    throw ConfigError({Diagnostic{Location{path, 0, 0}, "", std::string(e.what()).substr(path.size() + 2)}});
  }
  dir = fs::absolute(fs::path(path), ec).parent_path();
  return text;
}

std::vector<ConfigDocument> compose_documents(const std::string& text, const std::string& name, const fs::path& dir,
                                              std::vector<Diagnostic>& diags, bool& parsed) {
  parsed = true;
  Composer c(diags, parsed);
  c.start(name, dir);
  c.add(text, name, dir);
  return c.take();
}

}  // namespace trainer::config
