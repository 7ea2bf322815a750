// The regular expressions users name in a config (train.freeze, model.init.skip, optim.groups[].match),
// matched against parameter and tensor names. RE2, not std::regex: std::regex recurses (a long literal
// or deep nesting overflows the stack) and backtracks (`(a*)*b` over a long name never ends). RE2
// compiles to an automaton, so a match costs time linear in the name, whatever the pattern.
// The syntax is RE2's (https://github.com/google/re2/wiki/Syntax): ECMAScript's everyday subset
// (classes, \d \w \s, anchors, alternation, (?:...), {m,n}); no backreferences or lookaround.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace re2 {
class RE2;
}

namespace trainer::config {

// Bounds on a pattern, checked before RE2 sees it: no name-matching pattern needs more, and a
// generated one that does is refused with a message rather than compiled.
inline constexpr size_t kPatternMaxChars = 1000;
inline constexpr int kPatternMaxNesting = 32;  // nested groups
inline constexpr const char* kPatternSyntax = "RE2 syntax; no backreferences or lookaround";

class NamePattern {
 public:
  // Why `pattern` is refused, as a predicate ("is too long: ...", "nests groups ...", "is not a valid
  // regular expression (...): ..."), or nothing.
  static std::optional<std::string> problem(const std::string& pattern);

  // Throws std::invalid_argument with problem()'s text for a pattern it refuses.
  explicit NamePattern(const std::string& pattern);

  // Search semantics, as before (std::regex_search): the pattern may match anywhere in the name;
  // anchor it with ^...$ to match the whole name.
  bool found_in(const std::string& name) const;

  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::shared_ptr<const re2::RE2> re_;
};

}  // namespace trainer::config
