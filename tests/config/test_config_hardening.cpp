// Hostile configs refused at load (issue 18): non-UTF-8 text, non-finite numbers, a second YAML
// document, run names that are not one folder name, a dist.store that cannot work.
#include <catch2/catch.hpp>

#include "config/load.hpp"
#include "config/schema.hpp"
#include "test_util.hpp"

using namespace trainer::config;

namespace {

// The diagnostics of loading `yaml` from a real file, as printed, with the scratch folder cut off.
std::vector<std::string> hardening_errors(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  auto dir = trainer::test::scratch_dir("config_hardening");
  auto file = dir / "exp.yaml";
  trainer::test::write_file(file, yaml);
  std::vector<std::string> out;
  try {
    load_and_validate(file.string(), overrides, ValidateOptions{});
  } catch (const ConfigError& e) {
    for (const auto& d : e.diagnostics()) {
      std::string s = d.str();
      auto p = s.find("exp.yaml");
      out.push_back(p == std::string::npos ? s : s.substr(p));
    }
  }
  return out;
}

const std::string kHead = "train:\n  max_steps: 10\ndata:\n  format: synthetic\n";  // 4 lines

}  // namespace

TEST_CASE("first_invalid_utf8 finds stray, truncated, overlong and surrogate bytes", "[unit]") {
  CHECK_FALSE(first_invalid_utf8(""));
  CHECK_FALSE(first_invalid_utf8("plain ascii"));
  CHECK_FALSE(first_invalid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));  // é, €, an emoji
  CHECK(first_invalid_utf8("ab\xFF") == std::optional<size_t>(2));
  CHECK(first_invalid_utf8("ab\xC3") == std::optional<size_t>(2));          // truncated sequence
  CHECK(first_invalid_utf8("\xC0\xAF") == std::optional<size_t>(0));        // overlong '/'
  CHECK(first_invalid_utf8("x\xE0\x80\xAF") == std::optional<size_t>(1));   // overlong, 3 bytes
  CHECK(first_invalid_utf8("\xED\xA0\x80") == std::optional<size_t>(0));    // UTF-16 surrogate
  CHECK(first_invalid_utf8("\xF4\x90\x80\x80") == std::optional<size_t>(0));  // above U+10FFFF
  CHECK(first_invalid_utf8("\xE2\x82") == std::optional<size_t>(0));
  CHECK(printable("a\xFF\x01\xC3\xA9") == "a\\xFF\\x01\xC3\xA9");
}

TEST_CASE("a config string that is not UTF-8 is a config error at its position", "[unit]") {
  CHECK(hardening_errors(kHead + "run:\n  name: ab\xFF" "cd\n") ==
        std::vector<std::string>{"exp.yaml:6:9: run.name: not valid UTF-8 (byte 0xFF at offset 2 of 'ab\\xFFcd'); "
                                 "config text must be UTF-8"});
  // a path key, a choice key and a key name are checked the same way
  auto e = hardening_errors(kHead + "checkpoint:\n  dir: /tmp/\xC3(\noptim:\n  name: sg\xE9\n");
  REQUIRE(e.size() == 2);
  CHECK(e[0] == "exp.yaml:6:8: checkpoint.dir: not valid UTF-8 (byte 0xC3 at offset 5 of '/tmp/\\xC3('); "
                "config text must be UTF-8");
  CHECK(e[1] == "exp.yaml:8:9: optim.name: not valid UTF-8 (byte 0xE9 at offset 2 of 'sg\\xE9'); "
                "config text must be UTF-8");
  e = hardening_errors(kHead + "optim:\n  l\xFFr: 0.1\n");
  CHECK(e == std::vector<std::string>{"exp.yaml:6:3: optim.l\\xFFr: not valid UTF-8 (byte 0xFF at offset 7 of "
                                      "'optim.l\\xFFr'); config text must be UTF-8"});
  // valid UTF-8 is taken as is
  CHECK(hardening_errors(kHead + "run:\n  name: r\xC3\xA9sum\xC3\xA9-\xE2\x82\xAC\n").empty());
}

TEST_CASE("an override value that is not UTF-8 is a config error", "[unit]") {
  CHECK(hardening_errors(kHead, {"run.name=x\xC3"}) ==
        std::vector<std::string>{"--set run.name=x\\xC3: run.name: not valid UTF-8 (byte 0xC3 at offset 1 of "
                                 "'x\\xC3'); config text must be UTF-8"});
  CHECK(hardening_errors(kHead, {"data.path=\xED\xA0\x80"}).size() == 1);
  CHECK(hardening_errors(kHead, {"data.normalize.mode=\xFF"}).size() == 1);
}

TEST_CASE("a relative path under a folder whose name is not UTF-8 is refused", "[unit]") {
  auto dir = trainer::test::scratch_dir("config_hardening_dir") / "bad\xFF";
  trainer::test::write_file(dir / "exp.yaml", kHead + "run:\n  out_dir: runs\n");
  try {
    load_config((dir / "exp.yaml").string());
    FAIL("no error");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(e.diagnostics()[0].key == "run.out_dir");
    CHECK_THAT(e.diagnostics()[0].message, Catch::Contains("which is not valid UTF-8") &&
                                               Catch::Contains("use an absolute path"));
  }
}

TEST_CASE("non-finite numbers are refused for every float key", "[unit]") {
  CHECK(hardening_errors(kHead + "optim:\n  lr: .nan\n") ==
        std::vector<std::string>{"exp.yaml:6:7: optim.lr: expected a finite number, got '.nan'"});
  // keys whose range is open above take no infinity either, nor a literal that overflows
  CHECK(hardening_errors(kHead, {"train.grad_clip=.inf"}) ==
        std::vector<std::string>{"--set train.grad_clip=.inf: train.grad_clip: expected a finite number, got '.inf'"});
  CHECK(hardening_errors(kHead, {"optim.lr=1e999"}).size() == 1);
  RunConfig scratch;
  int floats = 0;
  for (const auto& f : describe_fields(scratch)) {
    if (f.type != FieldType::Float) continue;
    ++floats;
    for (const char* v : {".nan", ".NaN", ".inf", "-.inf", "+.Inf"}) {
      INFO(f.key << "=" << v);
      auto e = hardening_errors(kHead, {f.key + "=" + v});
      REQUIRE(e.size() == 1);
      CHECK(e[0] == "--set " + f.key + "=" + v + ": " + f.key + ": expected a finite number, got '" + v + "'");
    }
  }
  CHECK(floats >= 15);
  // and every element of a list of numbers
  CHECK(hardening_errors(kHead + "optim:\n  betas: [0.9, .nan]\n") ==
        std::vector<std::string>{"exp.yaml:6:10: optim.betas: expected a list of finite numbers; element 2 of the "
                                 "list is '.nan'"});
  // found from outside: "expected a list of numbers, got a list"; two betas out of range, two identical errors
  CHECK(hardening_errors(kHead, {"optim.betas=[a,b]"}) ==
        std::vector<std::string>{"--set optim.betas=[a,b]: optim.betas: expected a list of numbers; element 1 of the "
                                 "list is 'a'"});
  CHECK(hardening_errors(kHead, {"optim.betas=[2,3]"}) ==
        std::vector<std::string>{"--set optim.betas=[2,3]: optim.betas: each beta must be in [0, 1), got [2, 3]"});
  // a quoted number is a string to YAML: taken as the number in silence before
  CHECK(hardening_errors(kHead + "optim:\n  lr: \"0.05\"\n") ==
        std::vector<std::string>{"exp.yaml:6:7: optim.lr: expected a number, got the string '0.05' (quoted: write it "
                                 "without quotes)"});
  CHECK(hardening_errors(kHead, {"train.max_steps=!!str 3"}).size() == 1);
  CHECK(hardening_errors(kHead, {" optim.lr=0.1"}) ==
        std::vector<std::string>{"--set  optim.lr=0.1: optim.lr: the key has a space before or after it "
                                 "(' optim.lr'); write --set KEY=VALUE with nothing around KEY"});
  CHECK(hardening_errors(kHead, {"data.normalize.mean=[.inf]"}).size() == 1);
}

TEST_CASE("a second YAML document in the file is refused, not ignored", "[unit]") {
  CHECK(hardening_errors(kHead + "---\noptim:\n  lr: 5\n") ==
        std::vector<std::string>{"exp.yaml:6:1: the file holds 2 YAML documents (separated by '---'); a config is "
                                 "one document"});
  // an empty second document, and documents that open with a marker
  CHECK(hardening_errors(kHead + "---\n") ==
        std::vector<std::string>{"exp.yaml:5:1: the file holds 2 YAML documents (separated by '---'); a config is "
                                 "one document"});
  CHECK(hardening_errors("---\n" + kHead + "--- # another\n").size() == 1);
  CHECK(hardening_errors("---\n" + kHead).empty());   // one document with its marker is fine
  CHECK(hardening_errors(kHead + "...\n").empty());  // so is an end marker
  // an override value holding two documents
  CHECK(hardening_errors(kHead, {"optim.lr=0.1\n---\n0.2"}) ==
        std::vector<std::string>{"--set optim.lr=0.1\\x0A---\\x0A0.2: optim.lr: the value holds 2 YAML documents; "
                                 "give one value"});
}

TEST_CASE("run.name must be one safe folder name", "[unit]") {
  const std::string sep = "has a path separator; a run name is one folder name (use run.out_dir for the parent)";
  CHECK(hardening_errors(kHead + "run:\n  name: ..\n") ==
        std::vector<std::string>{"exp.yaml:6:3: run.name: '..' names a folder that is not a new one under run.out_dir"});
  CHECK(hardening_errors(kHead, {"run.name=."}) ==
        std::vector<std::string>{"--set run.name=.: run.name: '.' names a folder that is not a new one under run.out_dir"});
  CHECK(hardening_errors(kHead, {"run.name="}) ==
        std::vector<std::string>{"--set run.name=: run.name: is empty; a run needs a name (its folder under run.out_dir)"});
  CHECK(hardening_errors(kHead + "run:\n  name: ''\n").size() == 1);
  CHECK(hardening_errors(kHead + "run:\n  name:\n").size() == 1);  // null = empty
  for (const std::string& bad : std::vector<std::string>{"../x", "a/b", "/etc", "x/..", "a\\b"}) {
    INFO(bad);
    CHECK(hardening_errors(kHead, {"run.name=" + bad}) ==
          std::vector<std::string>{"--set run.name=" + bad + ": run.name: '" + bad + "' " + sep});
  }
  CHECK(hardening_errors(kHead, {"run.name=a\tb"}) ==
        std::vector<std::string>{"--set run.name=a\\x09b: run.name: 'a\\x09b' has a control character"});
  CHECK(hardening_errors(kHead, {"run.name=" + std::string(256, 'x')}).size() == 1);
  for (const std::string& ok : std::vector<std::string>{"exp-1.2_b", "...", ".hidden", "with space", std::string(255, 'x')}) {
    INFO(ok);
    CHECK(hardening_errors(kHead, {"run.name=" + ok}).empty());
  }
}

TEST_CASE("dist.store must be empty or file:///absolute/path", "[unit]") {
  CHECK(hardening_errors(kHead, {"dist.store=file://relative/x"}) ==
        std::vector<std::string>{"--set dist.store=file://relative/x: dist.store: 'file://relative/x': expected "
                                 "file:///absolute/path (three slashes) on a file system every rank sees"});
  CHECK(hardening_errors(kHead, {"dist.store=tcp://h:1"}) ==
        std::vector<std::string>{"--set dist.store=tcp://h:1: dist.store: 'tcp://h:1': expected \"\" (a TCPStore at "
                                 "MASTER_ADDR:MASTER_PORT) or file:///path"});
  CHECK(hardening_errors(kHead, {"dist.store=file:///shared/rdzv"}).empty());
}
