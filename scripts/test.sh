#!/usr/bin/env bash
# The whole test suite (what CI runs). Extra arguments go to ctest, e.g. scripts/test.sh -LE slow
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${TRAINER_BUILD_DIR:-$repo/build}
# scratch folders of earlier runs (one per test process) go first
rm -rf "$build_dir/test-tmp"
ctest --test-dir "$build_dir" --output-on-failure -j 2 --timeout 900 "$@"
