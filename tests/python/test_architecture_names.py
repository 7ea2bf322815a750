"""Every source file is named in docs/ARCHITECTURE.md, so a newcomer finds the room of a change there.

A file's name is its stem without the CUDA seam's suffix: `cuda_copy_cuda.cpp` and
`cuda_copy_nocuda.cpp` are both `cuda_copy`. It must appear in the document as a whole word (as
`cuda_copy`, `cuda_copy.hpp` or `cuda_copy_cuda.cpp`, not only inside a longer name such as
`cuda_copy_pool`). The test fails naming each file under src/, models/ or apps/ whose name the
document lacks. It first runs the same check on a small synthetic tree with one unnamed file and
requires that file reported, so a checker that stops seeing anything fails too.
"""
import os
import re
import sys
import tempfile

ROOT = os.environ.get("TRAINER_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
SCANNED = ("src", "models", "apps")
SOURCE_EXT = (".cpp", ".hpp", ".h", ".cu")
SEAM_SUFFIXES = ("_nocuda", "_cuda")


def file_name(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    for suffix in SEAM_SUFFIXES:
        if stem.endswith(suffix) and len(stem) > len(suffix):
            return stem[: -len(suffix)]
    return stem


def named(doc_text, name):
    # a whole word, optionally followed by the seam's suffix or an extension
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?:_cuda|_nocuda)?(?![A-Za-z0-9_])",
                     doc_text) is not None


def check(root):
    with open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        doc = f.read()
    missing, files = [], 0
    for top in SCANNED:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if not n.endswith(SOURCE_EXT):
                    continue
                files += 1
                path = os.path.relpath(os.path.join(dirpath, n), root)
                if not named(doc, file_name(n)):
                    missing.append(f"{path}: `{file_name(n)}` is not named in docs/ARCHITECTURE.md")
    return missing, files


def self_test():
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "docs"))
        os.makedirs(os.path.join(t, "src", "data"))
        for n in ("loader.cpp", "loader.hpp", "cuda_copy_cuda.cpp", "cuda_copy_nocuda.cpp",
                  "resize.cpp", "resize_detail.hpp"):
            open(os.path.join(t, "src", "data", n), "w").close()
        with open(os.path.join(t, "docs", "ARCHITECTURE.md"), "w") as f:
            f.write("`loader.cpp` and `cuda_copy.hpp`; resize_detailed is another name; resize.\n")
        missing, files = check(t)
        want = ["src/data/resize_detail.hpp: `resize_detail` is not named in docs/ARCHITECTURE.md"]
        if missing != want or files != 6:
            raise SystemExit(f"self-test: expected {want} over 6 files, got {missing} over {files}")


def main():
    self_test()
    missing, files = check(ROOT)
    if files < 100:
        missing.append(f"scanned only {files} source files under {', '.join(SCANNED)} of {ROOT}")
    for m in missing:
        print(m)
    if missing:
        print(f"{len(missing)} source file(s) not named in docs/ARCHITECTURE.md")
        return 1
    print(f"ok: the {files} source files under {', '.join(SCANNED)} are named in docs/ARCHITECTURE.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
