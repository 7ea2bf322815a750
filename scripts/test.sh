#!/usr/bin/env bash
# The test suite (what CI runs): every test but those labelled slow ([slow] cases: the recovery
# chaos matrices and the SLURM requeue, minutes each on a 2-core host). Extra arguments go to ctest,
# e.g. scripts/test.sh -R '^config\.'
#   --all      the slow ones too (the whole suite; run it before a change to recovery lands)
#   --stress   run it with a CPU hog on every core for the whole run (a host at load ~2 x cores, as a
#              shared CI machine is); the tests' deadlines stay what they are and must hold
# TRAINER_TEST_TIMEOUT_SCALE=F (default 1) multiplies every deadline inside the tests and ctest's
# per-test limit, for a machine slower than the project's 2-core host (tests/test_util.hpp).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${TRAINER_BUILD_DIR:-$repo/build}
stress=0
all=0
args=()
for a in "$@"; do
  case "$a" in
    --stress) stress=1 ;;
    --all) all=1 ;;
    *) args+=("$a") ;;
  esac
done
# ctest's -L / -LE are regular expressions over the labels ("<area>" and "<area>-slow")
if [ "$all" = 0 ]; then args=(-LE slow "${args[@]}"); fi
scale=${TRAINER_TEST_TIMEOUT_SCALE:-1}
limit=$(awk -v s="$scale" 'BEGIN { if (s + 0 <= 0) exit 1; printf "%d", 900 * s + 0.5 }') ||
  { echo "TRAINER_TEST_TIMEOUT_SCALE=$scale is not a positive number" >&2; exit 2; }

# the test programs (scripts/setup.sh builds the trainer binary alone); a no-op when they are built
if [ ! -f "$build_dir/build.ninja" ]; then
  echo "[test] $build_dir is not configured: run scripts/setup.sh first" >&2
  exit 2
fi
echo "[test] building the test programs in $build_dir"
start=$(date +%s)
cmake --build "$build_dir" -j "$(nproc)"
echo "[test] build done in $(( $(date +%s) - start )) s"

hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${hogs[@]}"; do wait "$pid" 2>/dev/null || true; done
  hogs=()
}
if [ "$stress" = 1 ]; then
  trap stop_hogs EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  for _ in $(seq "$(nproc)"); do
    # a busy loop at normal priority, ended by its pid when the suite ends
    ( trap - INT TERM; while :; do :; done ) &
    hogs+=("$!")
  done
  echo "[test] --stress: ${#hogs[@]} CPU hogs (pids ${hogs[*]}) for the whole run"
fi

# scratch folders of earlier runs (one per test process) go first
rm -rf "$build_dir/test-tmp"
ctest --test-dir "$build_dir" --output-on-failure -j 2 --timeout "$limit" "${args[@]}"
