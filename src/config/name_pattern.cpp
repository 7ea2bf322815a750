#include "config/name_pattern.hpp"

#include <re2/re2.h>

#include <stdexcept>

namespace trainer::config {
namespace {

// The deepest nesting of groups, skipping escaped characters and character classes ("[(]").
int pattern_nesting(const std::string& p) {
  int depth = 0, deepest = 0;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;  // the escaped character is a literal
    } else if (in_class) {
      if (c == ']') in_class = false;
    } else if (c == '[') {
      in_class = true;
      if (i + 1 < p.size() && p[i + 1] == '^') ++i;
      if (i + 1 < p.size() && p[i + 1] == ']') ++i;  // "[]...]": a leading ] is a member
    } else if (c == '(') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ')') {
      depth = std::max(0, depth - 1);
    }
  }
  return deepest;
}

RE2::Options pattern_options() {
  RE2::Options o;
  o.set_log_errors(false);  // the error comes back to the config loader, not to stderr
  return o;
}

std::shared_ptr<const re2::RE2> pattern_compile(const std::string& p, std::string& error) {
  if (p.size() > kPatternMaxChars) {
    error = "is too long: " + std::to_string(p.size()) + " characters (the limit is " + std::to_string(kPatternMaxChars) + ")";
    return nullptr;
  }
  if (const int n = pattern_nesting(p); n > kPatternMaxNesting) {
    error = "nests groups " + std::to_string(n) + " deep (the limit is " + std::to_string(kPatternMaxNesting) + ")";
    return nullptr;
  }
  auto re = std::make_shared<const re2::RE2>(p, pattern_options());
  if (!re->ok()) {
    error = "is not a valid regular expression (" + std::string(kPatternSyntax) + "): " + re->error();
    return nullptr;
  }
  return re;
}

}  // namespace

std::optional<std::string> NamePattern::problem(const std::string& pattern) {
  std::string error;
  if (pattern_compile(pattern, error)) return std::nullopt;
  return error;
}

NamePattern::NamePattern(const std::string& pattern) : text_(pattern) {
  std::string error;
  re_ = pattern_compile(pattern, error);
  if (!re_) throw std::invalid_argument("'" + pattern + "' " + error);
}

bool NamePattern::found_in(const std::string& name) const { return re2::RE2::PartialMatch(name, *re_); }

}  // namespace trainer::config
