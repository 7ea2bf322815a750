"""No file outside models/ knows a model family by name (the ModelSpec issue's rule).

Every fact about a family lives in its ModelSpec (models/); src/ and apps/ ask the spec or the
config::ArchRules it registers. This test reads the family names from the specs
(`s.rules.name = "..."` in models/*.cpp) and fails, naming file and line, when a file under src/ or
apps/ compares model.arch (`arch ==` / `arch !=`), writes a family's name as a string literal, or
includes a family's header (models/gpt.hpp: the .hpp beside the .cpp that defines the spec; what the
engine needs of a family comes through the ModelSpec of models/model.hpp).
One literal is allowed: the default value of model.arch in src/config/config.hpp. A synthetic tree
with one defect of each kind runs first, so a checker that stops seeing anything fails too.
"""
import os
import re
import sys
import tempfile

ROOT = os.environ.get("TRAINER_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
NAME_RE = re.compile(r'rules\.name\s*=\s*"([^"]+)"')
COMPARE_RE = re.compile(r'\barch(\(\))?\s*[!=]=')
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]')
ALLOWED = {("src/config/config.hpp", 'std::string arch = "')}


def family_names(root):
    """The family names the specs set, and the headers of the files that set them."""
    names, headers = set(), set()
    for name in sorted(os.listdir(os.path.join(root, "models"))):
        if name.endswith(".cpp"):
            with open(os.path.join(root, "models", name), encoding="utf-8") as f:
                found = NAME_RE.findall(f.read())
            names.update(found)
            if found:
                headers.add("models/" + name[:-len(".cpp")] + ".hpp")
    return names, headers


def problems(root, names, headers):
    out = []
    literal = re.compile(r'"(' + "|".join(map(re.escape, sorted(names))) + r')"')
    for top in ("src", "apps"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        code = line.split("//", 1)[0]
                        inc = INCLUDE_RE.match(code)
                        if inc and inc.group(1) in headers:
                            out.append(f"{rel}:{n}: includes the family header {inc.group(1)}: {line.strip()}")
                            continue
                        if COMPARE_RE.search(code):
                            out.append(f"{rel}:{n}: compares model.arch: {line.strip()}")
                        m = literal.search(code)
                        if m and not any(rel == a and prefix in code for a, prefix in ALLOWED):
                            out.append(f"{rel}:{n}: names the family '{m.group(1)}': {line.strip()}")
    return out


def self_check():
    with tempfile.TemporaryDirectory() as tmp:
        for d in ("models", "src/engine", "src/config", "apps"):
            os.makedirs(os.path.join(tmp, d))
        with open(os.path.join(tmp, "models/cnn.cpp"), "w") as f:
            f.write('ModelSpec cnn_spec() { ModelSpec s; s.rules.name = "cnn"; return s; }\n')
        with open(os.path.join(tmp, "src/engine/a.cpp"), "w") as f:
            f.write('if (cfg.model.arch == x) {}\nauto m = registry.spec("cnn");\n// "cnn" in a comment is fine\n'
                    '#include "models/cnn.hpp"\n#include "models/model.hpp"\n')
        with open(os.path.join(tmp, "src/config/config.hpp"), "w") as f:
            f.write('  std::string arch = "cnn";  // the default\n')
        names, headers = family_names(tmp)
        assert names == {"cnn"} and headers == {"models/cnn.hpp"}, (names, headers)
        found = problems(tmp, names, headers)
        assert len(found) == 3 and "a.cpp:1: compares" in found[0] and "a.cpp:2: names the family 'cnn'" in found[1] \
            and "a.cpp:4: includes the family header models/cnn.hpp" in found[2], found


def main():
    self_check()
    names, headers = family_names(ROOT)
    if len(names) < 3:
        print(f"FAIL: found only {sorted(names)} in models/*.cpp; the specs set rules.name")
        return 1
    found = problems(ROOT, names, headers)
    for p in found:
        print("FAIL:", p)
    if found:
        return 1
    print(f"ok: no file of src/ or apps/ names a model family ({', '.join(sorted(names))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
