// The schema's text helpers: type names, values and defaults as YAML text, "did you mean", numbers as
// messages show them and literals yaml-cpp misreads; and config text as UTF-8 (load.hpp's
// first_invalid_utf8, printable).
#include "config/schema.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "config/load.hpp"

namespace trainer::config {

std::string type_name(const FieldInfo& f) {
  switch (f.type) {
    case FieldType::Bool: return "bool";
    case FieldType::Int: return f.accepts_auto ? "int | auto" : "int";
    case FieldType::Float: return "float";
    case FieldType::String: return "string";
    case FieldType::Path: return "path";
    case FieldType::FloatList: return "list of float";
    case FieldType::StringList: return f.regex ? "list of regex" : f.accepts_auto ? "list of string | auto" : "list of string";
    case FieldType::PrefixMap: return "map of prefix to prefix";
    case FieldType::GroupList: return "list of {match, lr, weight_decay}";
    case FieldType::Choice: {
      std::string s;
      for (const auto& c : f.choices) s += (s.empty() ? "" : " | ") + (c.empty() ? std::string("\"\"") : c);
      return s;
    }
  }
  return "?";
}

namespace {
std::string float_text(double v) {
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  if (std::isnan(v)) return ".nan";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  std::string s(buf, end);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // keep it a float in YAML
  return s;
}
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}
// The collection keys as YAML flow text: ["a", "b"], {"module.": ""}, [{match: "x", lr: 0.1}].
std::string collection_text(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + quote(v[i]);
  return s + "]";
}
std::string collection_text(const PrefixPairs& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + quote(v[i].first) + ": " + quote(v[i].second);
  return s + "}";
}
std::string collection_text(const std::vector<ParamGroupRule>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    s += std::string(i ? ", " : "") + "{match: " + quote(v[i].match);
    if (v[i].lr) s += ", lr: " + float_text(*v[i].lr);
    if (v[i].weight_decay) s += ", weight_decay: " + float_text(*v[i].weight_decay);
    s += "}";
  }
  return s + "]";
}
}  // namespace

std::string value_text(const FieldInfo& f) {
  if (const auto* e = std::get_if<EnumRef>(&f.ref)) return quote(f.choices.at(e->get()));
  return std::visit(
      [&](const auto& r) -> std::string {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, EnumRef>) return "";  // handled above
        else {
          const auto& v = *r;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
          else if constexpr (std::is_same_v<T, int64_t>) return f.accepts_auto && v == f.auto_value ? "auto" : std::to_string(v);
          else if constexpr (std::is_same_v<T, double>) return float_text(v);
          else if constexpr (std::is_same_v<T, std::string>) return quote(v);
          else if constexpr (std::is_same_v<T, std::vector<double>>) {
            std::string s = "[";
            for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + float_text(v[i]);
            return s + "]";
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            return f.accepts_auto && v.empty() ? "auto" : collection_text(v);  // dist.pipeline.stages: [] is auto
          } else {
            return collection_text(v);  // train.freeze, model.init.rename, optim.groups
          }
        }
      },
      f.ref);
}

const FieldInfo& default_field(const FieldInfo& f) {
  static RunConfig defaults;
  static const std::vector<FieldInfo> fields = describe_fields(defaults);
  for (const auto& d : fields)
    if (d.key == f.key) return d;
  throw std::logic_error("default_field: " + f.key + " is not a schema key");
}

std::string default_text(const FieldInfo& f) { return value_text(default_field(f)); }

namespace {
size_t levenshtein(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string did_you_mean(const std::string& unknown, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_score = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = levenshtein(unknown, c);
    bool close = d <= std::max<size_t>(2, std::min(unknown.size(), c.size()) / 3);
    // "lr_rate" -> "lr", "batch" -> "batch_size": a known name that starts the unknown one or v.v.
    bool prefix = c.size() >= 2 && unknown.size() >= 2 &&
                  (unknown.rfind(c, 0) == 0 || c.rfind(unknown, 0) == 0);
    if (!close && !prefix) continue;
    size_t score = close ? d : d + 100;  // prefer a close spelling over a prefix
    if (score < best_score) {
      best_score = score;
      best = c;
    }
  }
  return best;
}

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no UTF-16
// surrogates, nothing above U+10FFFF), or 0 when the byte there does not start one.
size_t utf8_sequence_at(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = byte(i);
  size_t len = 0;
  unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) len = 3, lo = 0xA0;
  else if (c == 0xED) len = 3, hi = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) len = 3;
  else if (c == 0xF0) len = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else if (c == 0xF4) len = 4, hi = 0x8F;
  else return 0;
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k)
    if (byte(i + k) < (k == 1 ? lo : 0x80) || byte(i + k) > (k == 1 ? hi : 0xBF)) return 0;
  return len;
}

}  // namespace

std::optional<size_t> first_invalid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_at(s, i);
    if (len == 0) return i;
    i += len;
  }
  return std::nullopt;
}

std::string printable(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_at(s, i);
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (len == 0 || c < 0x20 || c == 0x7F) {  // a stray byte or a control character: shown as \xNN
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
      ++i;
    } else {
      out.append(s, i, len);
      i += len;
    }
  }
  return out;
}

std::string number_text(double v) {
  for (int digits : {6, 9, 12, 17}) {
    std::ostringstream o;
    o << std::setprecision(digits) << v;
    if (digits == 17 || std::strtod(o.str().c_str(), nullptr) == v) return o.str();
  }
  return "";
}

bool leading_zero_integer(const std::string& text) {
  const size_t i = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  return text.size() > i + 1 && text[i] == '0' && text[i + 1] >= '0' && text[i + 1] <= '9';
}

bool underflows_to_zero(const std::string& text, double v) {
  if (v != 0) return false;
  for (char c : text) {
    if (c == 'e' || c == 'E') break;
    if (c >= '1' && c <= '9') return true;
  }
  return false;
}

}  // namespace trainer::config
