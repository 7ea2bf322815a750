// Hostile patterns (issue 28.2): every user-named regex (train.freeze, model.init.skip,
// optim.groups[].match) is a config::NamePattern (RE2). A 100,000-character literal or 20,000 nested
// groups is a config error at its FILE:LINE:COL, never a stack overflow; the patterns that make a
// backtracking engine run for ever match in linear time; search semantics are those of before.
#include <catch2/catch.hpp>

#include "config/load.hpp"
#include "config/name_pattern.hpp"
#include "hostile_util.hpp"
#include "test_util.hpp"

using namespace trainer::config;

namespace {

std::vector<std::string> pattern_errors(const std::string& yaml) {
  auto dir = trainer::test::scratch_dir("config_patterns");
  auto file = dir / "pat.yaml";
  trainer::test::write_file(file, yaml);
  std::vector<std::string> out;
  try {
    load_and_validate(file.string(), {}, {});
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) {
      std::string s = d.str();
      auto p = s.find("pat.yaml");
      out.push_back(p == std::string::npos ? s : s.substr(p));
    }
  }
  return out;
}

const std::string kPatHead = "data:\n  format: synthetic\n";

// The config text putting `pattern` (single-quoted YAML) under each of the three pattern keys.
std::vector<std::pair<std::string, std::string>> pattern_configs(const std::string& pattern) {
  const std::string q = "'" + pattern + "'";
  const std::string steps = "train:\n  max_steps: 10\n";
  return {{"train.freeze", kPatHead + "train:\n  freeze: [" + q + "]\n  max_steps: 10\n"},
          {"model.init.skip", kPatHead + "model:\n  init:\n    skip: [" + q + "]\n" + steps},
          {"optim.groups", kPatHead + "optim:\n  groups:\n    - {match: " + q + ", lr: 0.1}\n" + steps}};
}

}  // namespace

TEST_CASE("hostile patterns: a huge literal or deep nesting is a config error at its position, for every key", "[unit]") {
  const std::string literal(100000, 'a');
  const std::string nested = std::string(20000, '(') + "a" + std::string(20000, ')');
  const std::string nested400 = std::string(400, '(') + "a" + std::string(400, ')');
  struct Case {
    std::string pattern, why;
  } cases[] = {{literal, "is too long: 100000 characters (the limit is 1000)"},
               {nested, "is too long: 40001 characters (the limit is 1000)"},
               {nested400, "nests groups 400 deep (the limit is 32)"},
               {"fc(", "is not a valid regular expression (RE2 syntax; no backreferences or lookaround): missing )"},
               {"^(?!fc\\.)", "is not a valid regular expression (RE2 syntax; no backreferences or lookaround): invalid perl operator"},
               {"(a)\\1", "is not a valid regular expression (RE2 syntax; no backreferences or lookaround): invalid escape"},
               {"a{2000}", "is not a valid regular expression (RE2 syntax; no backreferences or lookaround): invalid repetition size"}};
  for (const auto& c : cases)
    for (const auto& [key, yaml] : pattern_configs(c.pattern)) {
      INFO(key << " " << c.why);
      std::vector<std::string> errs;
      const auto e = trainer::test::error_within(60, [&] { errs = pattern_errors(yaml); }, "pattern config");
      CHECK(e.empty());  // the loader reports diagnostics, it throws nothing else
      INFO(errs.size() << " errors; the last: " << (errs.empty() ? "" : errs.back()));
      REQUIRE(errs.size() == 1);
      const int line = key == "train.freeze" ? 4 : 5;
      const std::string at = "pat.yaml:" + std::to_string(line) + ":";
      CHECK(errs[0].rfind(at, 0) == 0);
      CHECK(errs[0].find(": " + key + ": '" + c.pattern.substr(0, 80)) != std::string::npos);
      CHECK(errs[0].find(c.why) != std::string::npos);
    }
}

TEST_CASE("hostile patterns: catastrophic patterns match long names in linear time", "[unit]") {
  const std::string as(100000, 'a'), xs(100000, 'x');
  struct Case {
    const char* pattern;
    std::string name;
    bool found;
  } cases[] = {{"(a*)*b", as, false}, {"(.*)*x", as, false}, {"(x+x+)+y", xs, false},
               {"(a|aa)+$", as, true}, {"(a*)*b", as + "b", true}, {"^(a+)+$", as + "!", false}};
  for (const auto& c : cases) {
    INFO(c.pattern);
    bool found = !c.found;
    const auto e = trainer::test::error_within(60, [&] { found = NamePattern(c.pattern).found_in(c.name); }, c.pattern);
    CHECK(e.empty());
    CHECK(found == c.found);
  }
}

TEST_CASE("name patterns keep search semantics: anywhere in the name unless anchored", "[unit]") {
  CHECK(NamePattern("fc").found_in("model.fc.weight"));
  CHECK_FALSE(NamePattern("^fc").found_in("model.fc.weight"));
  CHECK(NamePattern("^fc\\.").found_in("fc.weight"));
  CHECK(NamePattern("weight$").found_in("fc.weight"));
  CHECK_FALSE(NamePattern("^fc$").found_in("fc.weight"));
  CHECK(NamePattern("^layer[12]\\.").found_in("layer2.0.conv1.weight"));
  CHECK(NamePattern("(?i)BN").found_in("bn1.weight"));
  CHECK(NamePattern("\\d\\.attn").found_in("h.3.attn.c_attn.weight"));
  CHECK_FALSE(NamePattern("a.b").found_in("a\nb"));  // '.' does not match a newline, as in ECMAScript
  CHECK_FALSE(NamePattern::problem("^(conv1|bn1|layer[1-4])\\.").has_value());
  CHECK(NamePattern::problem(std::string(1000, 'a')) == std::nullopt);  // at the limit: accepted
  CHECK(NamePattern::problem(std::string(32, '(') + std::string(32, ')')) == std::nullopt);
  CHECK(NamePattern::problem("[(((((((((((((((((((((((((((((((((((((]") == std::nullopt);  // a class, not groups
  CHECK_THROWS_AS(NamePattern("("), std::invalid_argument);
}
