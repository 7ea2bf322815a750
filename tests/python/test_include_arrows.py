"""The dependency arrows of docs/ARCHITECTURE.md, checked against the code and the build.

The `arrows` table in docs/ARCHITECTURE.md says, per area, its folder, its CMake target and the
areas its files may include. This test fails, naming the file and line, when
  - a file under src/, models/ or apps/ includes "x/..." of an area its row does not allow;
  - a target's target_link_libraries (root CMakeLists.txt) names a project library whose area none
    of its files include, or misses one they do include;
  - a library links an area PRIVATE although one of its headers includes it (its users would not
    get it), or PUBLIC although only its .cpp files do;
  - a folder of src/ has no row (a new area would otherwise escape the check), or a file includes
    a header that lies in no area's folder (src/engine/x.hpp beside the engine's rooms).
An area is a folder: `#include "engine/step/x.hpp"` belongs to the area whose folder holds
src/engine/step/x.hpp (the longest folder). Several areas may share one target (src/engine's rooms
are all trainer_engine): the arrows between them are checked, and a target's links are the union
of its areas' includes of other targets' areas.
Before looking at the real tree it runs the same checks on a small synthetic tree with one defect of
each kind and requires every defect reported, so a checker that stops seeing anything fails too.
"""
import os
import re
import sys
import tempfile

ROOT = os.environ.get("TRAINER_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
SCANNED = ("src", "models", "apps")
SOURCE_EXT = (".cpp", ".hpp", ".h", ".cc", ".cxx", ".cu")
HEADER_EXT = (".hpp", ".h")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*["<]([A-Za-z0-9_]+/[^">]+)[">]')
INCLUDE_ROOTS = ("", "src/")  # the project's include directories (trainer_setup_target)


def parse_arrows(doc_text):
    """Rows of the ```arrows block: {area: (folder, target, allowed set)}."""
    m = re.search(r"^```arrows\n(.*?)^```", doc_text, re.S | re.M)
    if not m:
        raise SystemExit("docs/ARCHITECTURE.md has no ```arrows block")
    rows = {}
    for n, line in enumerate(m.group(1).splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        cols = line.split()
        if len(cols) < 4:
            raise SystemExit(f"arrows table line {n}: want 'area folder target allowed...': {line!r}")
        area, folder, target, allowed = cols[0], cols[1], cols[2], cols[3:]
        rows[area] = (folder.rstrip("/"), target, set() if allowed == ["-"] else set(allowed))
    for area, (_, _, allowed) in rows.items():
        for other in allowed:
            if other not in rows:
                raise SystemExit(f"arrows table: {area} may include {other!r}, which has no row")
    return rows


def area_of(rel_path, rows):
    """The area whose folder holds rel_path (the longest matching folder), or None."""
    best = None
    for area, (folder, _, _) in rows.items():
        if rel_path.startswith(folder + "/") and (best is None or len(folder) > len(rows[best][0])):
            best = area
    return best


def include_area(inc, rows):
    """The area whose folder holds the header `inc` names, "?" for a path under a project folder
    that no row covers (src/engine/x.hpp), None for a header outside the project (torch/...)."""
    for prefix in INCLUDE_ROOTS:
        area = area_of(prefix + inc, rows)
        if area is not None:
            return area
    tops = {folder.split("/")[0] if not folder.startswith("src/") else folder.split("/")[1]
            for folder, _, _ in rows.values()}
    return "?" if inc.split("/")[0] in tops else None


def scan_includes(root, rows):
    """{area: {included area: [(rel path, line no, include text, is header)]}} and a file count.
    Included area "?": a project header in no area's folder."""
    found = {area: {} for area in rows}
    files = 0
    for top in SCANNED:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                area = area_of(rel, rows)
                if area is None:
                    continue  # reported by check_coverage when it is a folder of src/
                files += 1
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE_RE.match(line)
                        if not m:
                            continue
                        other = include_area(m.group(1), rows)
                        if other is None or other == area:
                            continue  # system headers, same-area headers
                        found[area].setdefault(other, []).append(
                            (rel, n, m.group(1), name.endswith(HEADER_EXT)))
    return found, files


def parse_links(cmake_text, rows):
    """{target: {linked target: visibility}} from every target_link_libraries(<target> ...) call.
    Visibility is PUBLIC, PRIVATE or INTERFACE; a plain list (no keyword) counts as PUBLIC for a
    library, as CMake treats it."""
    text = re.sub(r"#[^\n]*", "", cmake_text)
    targets = {target for _, target, _ in rows.values()}
    links = {}
    for m in re.finditer(r"\btarget_link_libraries\s*\(([^)]*)\)", text):
        tokens = m.group(1).split()
        if not tokens or tokens[0] not in targets:
            continue
        visibility = "PUBLIC"
        for tok in tokens[1:]:
            if tok in ("PUBLIC", "PRIVATE", "INTERFACE"):
                visibility = tok
                continue
            name = tok.replace("trainer::", "trainer_")
            if name in targets:
                links.setdefault(tokens[0], {})[name] = visibility
            elif name == "trainer_core":  # all of src/: hides which areas are really used
                links.setdefault(tokens[0], {})["<trainer_core>"] = visibility
    return links


def check(root):
    """Every violation as one line of text; empty when the tree keeps the arrows."""
    with open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        rows = parse_arrows(f.read())
    with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
        links = parse_links(f.read(), rows)
    found, files = scan_includes(root, rows)
    errors = []

    src = os.path.join(root, "src")
    for dirpath, dirs, names in os.walk(src):
        dirs.sort()
        rel = os.path.relpath(dirpath, root)
        top_level = os.path.dirname(rel) == "src"
        has_sources = any(n.endswith(SOURCE_EXT) for n in names)
        covered = area_of(f"{rel}/x", rows) is not None or any(
            folder.startswith(rel + "/") for folder, _, _ in rows.values())
        if rel != "src" and area_of(f"{rel}/x", rows) is None and (has_sources or (top_level and not covered)):
            errors.append(f"{rel}/: a folder with no row in the arrows table of docs/ARCHITECTURE.md")

    for area, (folder, target, allowed) in sorted(rows.items()):
        only = ", ".join(sorted(allowed)) or "its own headers"
        for other, uses in sorted(found[area].items()):
            for rel, n, inc, _ in uses:
                if other == "?":
                    errors.append(f'{rel}:{n}: includes "{inc}", which lies in no folder of the arrows table')
                elif other not in allowed:
                    errors.append(f'{rel}:{n}: includes "{inc}", but {area} may include only {only}')

    # links per target: the union of its areas' includes of other targets' areas
    for target in sorted({t for _, t, _ in rows.values()}):
        areas = sorted(a for a, (_, t, _) in rows.items() if t == target)
        folders = ", ".join(rows[a][0] + "/" for a in areas)
        uses_by_lib = {}
        for area in areas:
            for other, uses in found[area].items():
                if other != "?" and rows[other][1] != target:
                    uses_by_lib.setdefault(rows[other][1], []).extend(uses)
        linked = links.get(target, {})
        is_library = target.startswith("trainer_")
        if "<trainer_core>" in linked:
            errors.append(f"CMakeLists.txt: {target} links trainer_core; name the libraries it includes")
        for lib, uses in sorted(uses_by_lib.items()):
            uses.sort()
            rel, n, inc, _ = uses[0]
            if lib not in linked:
                errors.append(f'CMakeLists.txt: {target} does not link {lib}, but {rel}:{n} includes "{inc}"')
                continue
            in_header = [u for u in uses if u[3]]
            if is_library and in_header and linked[lib] == "PRIVATE":
                h = in_header[0]
                errors.append(f'CMakeLists.txt: {target} links {lib} PRIVATE, but its header {h[0]}:{h[1]} '
                              f'includes "{h[2]}" (users of {target} need it: PUBLIC)')
            if is_library and not in_header and linked[lib] == "PUBLIC":
                errors.append(f"CMakeLists.txt: {target} links {lib} PUBLIC, but only .cpp files include "
                              f'it (first {rel}:{n}: "{inc}"): PRIVATE')
        for lib in sorted(set(linked) - set(uses_by_lib) - {"<trainer_core>"}):
            lib_areas = "|".join(sorted(a for a, (_, t, _) in rows.items() if t == lib))
            errors.append(f'CMakeLists.txt: {target} links {lib}, but no file of {folders} '
                          f'includes "{lib_areas}/..."')
    return errors, files


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def self_test():
    """One defect of each kind in a synthetic tree; each must be reported."""
    with tempfile.TemporaryDirectory() as root:
        write(os.path.join(root, "docs", "ARCHITECTURE.md"),
              "x\n```arrows\n# area folder target may\nbase src/base trainer_base -\n"
              "mid src/mid trainer_mid base\ntop src/top trainer_top base mid\napps apps trainer base mid top\n"
              "low src/room/low trainer_room base\nhigh src/room/high trainer_room base low\n```\n")
        write(os.path.join(root, "CMakeLists.txt"),
              "target_link_libraries(trainer_mid PRIVATE trainer_base)  # header needs PUBLIC\n"
              "target_link_libraries(trainer_top PUBLIC trainer_base trainer_mid)  # base: .cpp only\n"
              "target_link_libraries(trainer_base PUBLIC trainer::mid)  # linked, included nowhere\n"
              "target_link_libraries(trainer PRIVATE trainer_core)\n"
              "target_link_libraries(trainer_room PUBLIC trainer_base)  # rooms: one target, no self link\n")
        write(os.path.join(root, "src/base/a.hpp"), '#include <vector>\n#include "base/b.hpp"\n')
        write(os.path.join(root, "src/mid/m.hpp"), '#pragma once\n#include "base/a.hpp"\n')
        write(os.path.join(root, "src/top/t.cpp"), '#include "base/a.hpp"\n  #  include "mid/m.hpp"\n')
        write(os.path.join(root, "src/top/t.hpp"), '#include "mid/m.hpp"\n')
        write(os.path.join(root, "src/stray/s.cpp"), "int s;\n")
        write(os.path.join(root, "apps/app/main.cpp"), '#include "top/t.hpp"\n')
        write(os.path.join(root, "src/base/up.cpp"), '\n\n#include "top/t.hpp"  // against the arrows\n')
        # two rooms of one target: high may include low, not the other way; no file above the rooms
        write(os.path.join(root, "src/room/low/l.hpp"), '#pragma once\n#include "base/a.hpp"\n')
        write(os.path.join(root, "src/room/high/h.hpp"), '#pragma once\n#include "room/low/l.hpp"\n')
        write(os.path.join(root, "src/room/low/l.cpp"), '#include "room/low/l.hpp"\n#include "room/high/h.hpp"\n'
              '#include "room/r.hpp"\n')
        write(os.path.join(root, "src/room/r.cpp"), "int r;\n")
        errors, files = check(root)
        want = [
            'src/base/up.cpp:3: includes "top/t.hpp", but base may include only its own headers',
            "CMakeLists.txt: trainer_mid links trainer_base PRIVATE, but its header src/mid/m.hpp:2",
            "CMakeLists.txt: trainer_top links trainer_base PUBLIC, but only .cpp files include it",
            'CMakeLists.txt: trainer_base links trainer_mid, but no file of src/base/ includes "mid/..."',
            'CMakeLists.txt: trainer_base does not link trainer_top, but src/base/up.cpp:3 includes "top/t.hpp"',
            "CMakeLists.txt: trainer links trainer_core",
            'CMakeLists.txt: trainer does not link trainer_top, but apps/app/main.cpp:1 includes "top/t.hpp"',
            "src/stray/: a folder with no row",
            'src/room/low/l.cpp:2: includes "room/high/h.hpp", but low may include only base',
            'src/room/low/l.cpp:3: includes "room/r.hpp", which lies in no folder of the arrows table',
            "src/room/: a folder with no row",
        ]
        missing = [w for w in want if not any(e.startswith(w) for e in errors)]
        assert files == 9, f"self-test scanned {files} files, want 9"
        assert not missing, "self-test: the checker missed\n  " + "\n  ".join(missing) + \
            "\nit reported\n  " + "\n  ".join(errors)
        # the correctly linked, allowed includes must not be reported
        assert len(errors) == len(want), "self-test: unexpected reports\n  " + "\n  ".join(errors)


def main():
    self_test()
    errors, files = check(ROOT)
    # the real tree has well over 100 source files; far fewer means the walk lost its way
    if files < 100:
        errors.append(f"scanned only {files} source files under {', '.join(SCANNED)} of {ROOT}")
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} violation(s) of the arrows in docs/ARCHITECTURE.md")
        return 1
    print(f"ok: {files} files keep the arrows of docs/ARCHITECTURE.md; CMake links match their includes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
