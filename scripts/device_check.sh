#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, PyTorch, CMake, ninja and a C++ compiler, run from
# the repository root:
#   1. builds trainer (and the test programs that hold [gpu] tests) against the LibTorch inside that
#      machine's PyTorch (python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'), with the
#      project's Debian libraries unpacked from .debs/ (scripts/fetch_device_debs.sh fetches them)
#      when the machine lacks them;
#   2. stops there, cleanly, when no CUDA device is visible;
#   3. runs the [gpu] tests;
#   4. feeds ResNet-50 (bf16, batch 256) from a generated ImageNet-like JPEG folder with half and all of
#      the node's cores as loader workers, next to torchvision's DataLoader + PyTorch eager and the
#      trainer's synthetic-data rate (scripts/bench/bench_feed.py), then times the input pipelines alone
#      at 1, 4 and all cores' workers (scripts/bench/bench_input.py);
#   5. benchmarks GPT-2 124M (bf16, block 1024) and ResNet-50 (bf16, channels_last, 224x224 synthetic)
#      for a fixed number of steps next to their PyTorch-Python equivalents (scripts/bench/bench_train.py
#      --device cuda): tokens/s, images/s, MFU = tokens/s x (6N + 12 n_layer block n_embd) / 989e12
#      (H100/H200 dense bf16), peak CUDA memory and trainer / PyTorch ratios; then ResNet-18-CIFAR
#      (bf16, batch 128) without and with train.cuda_graphs next to PyTorch eager (the graphs ratio);
#   6. dist.sharding full on GPT-2 124M (bf16, block 1024, synthetic tokens, 20 steps) next to none:
#      on 2 ranks over NCCL when there are two GPUs, else a world of one (where full shards nothing:
#      the check is that it runs the none path and logs none's losses); losses, tokens/s, held bytes;
#   7. dist.tensor_parallel: tp 2 over NCCL against one rank of the same global batch on two GPUs, or
#      on one GPU dist.tensor_parallel 1 (today's path: no tp collective, step 6's none losses);
#   8. dist.pipeline_parallel 2 in fp16 (the loss scale through the stages) with both ranks on
#      cuda:0 over Gloo, against one process in fp16 (scripts/bench/pp_shared_device.sh).
# The whole check is meant to fit in 8 minutes; the benchmark shrinks (--quick) or is skipped when the
# build left too little of DEVICE_CHECK_BUDGET_S.
# Reports: device_check.log, gpu_tests_<area>.log, bench_feed.{md,json}, bench_input.md,
#   bench_cuda_compare.{md,json}, bench_cuda_graphs.{md,json},
#   sharding_full_{none,full}.log, sharding_full.txt, tp_{base,tp}.log, tensor_parallel.txt and
#   pipeline_fp16.txt (the runs' logs under BUILD_DIR/pp).
# Environment: PYTHON (python3), BUILD_DIR (build-device), JOBS (nproc), DEVICE_CHECK_BUDGET_S (480),
#   DEVICE_CHECK_REQUIRE_GPU=1 (exit 2 instead of 0 when there is no CUDA device), OUT (results folder),
#   DEVICE_CHECK_SECTIONS (default "tests feed input compare graphs sharding tp pp": the parts to run),
#   DEVICE_CHECK_BENCH_SIZE (quick or a number of rounds for compare and graphs; default: by the budget),
#   DEVICE_CHECK_FEED_ARGS (more bench_feed.py arguments, e.g. "--steps 60 --warmup 20").
# Exit: 0 checked (or no GPU), 1 a build, test or benchmark failed, 2 no GPU with REQUIRE_GPU.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
build=${BUILD_DIR:-$repo/build-device}
jobs=${JOBS:-$(nproc)}
budget=${DEVICE_CHECK_BUDGET_S:-480}
results=${OUT:-$build/device-check}
t_start=$(date +%s)
mkdir -p "$build" "$results"
log_file="$results/device_check.log"
exec > >(tee "$log_file") 2>&1

elapsed() { echo $(( $(date +%s) - t_start )); }
sections=" ${DEVICE_CHECK_SECTIONS:-tests feed input compare graphs sharding tp pp} "
section_on() { [[ "$sections" == *" $1 "* ]]; }
say() { printf '[device_check %4ss] %s\n' "$(elapsed)" "$*"; }
die() { say "FAILED: $*"; exit 1; }

# --- 1. toolchain and LibTorch --------------------------------------------------------------------
command -v "$py" >/dev/null || die "no '$py' (set PYTHON to a Python with torch)"
torch_info=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path); print(torch.__version__)' 2>&1) ||
  die "'$py' cannot import torch: $torch_info"
torch_prefix=$(sed -n 1p <<<"$torch_info")
torch_version=$(sed -n 2p <<<"$torch_info")
say "LibTorch $torch_version from $torch_prefix"
# the host's cores as the per-worker figures need them: SMT siblings share a core's decode throughput
host_cpu() {
  local model threads cores sockets
  model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  threads=$(grep -c '^processor' /proc/cpuinfo)
  cores=$(awk -F: '/^physical id/{p=$2} /^core id/{print p":"$2}' /proc/cpuinfo | sort -u | wc -l)
  sockets=$(awk -F: '/^physical id/{print $2}' /proc/cpuinfo | sort -u | wc -l)
  echo "$model: $threads logical CPUs on $cores physical cores ($sockets socket(s)); $(nproc) usable here"
}
say "host: $(host_cpu)"
command -v cmake >/dev/null || die "cmake not found"
command -v ninja >/dev/null || die "ninja not found"
command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler (c++/g++) found"

# --- 2. the Debian libraries: the machine's own, else unpacked from .debs/ -------------------------
have_system_libs() {
  [ -f /usr/include/yaml-cpp/yaml.h ] && [ -f /usr/include/spdlog/spdlog.h ] && [ -f /usr/include/CLI/CLI.hpp ] &&
    [ -f /usr/include/catch2/catch.hpp ] && [ -f /usr/include/nlohmann/json.hpp ] && [ -f /usr/include/gloo/config.h ]
}

unpack_deb() {  # dpkg-deb where it exists, else ar + tar (the data member of a .deb)
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else
    local member
    member=$(ar t "$1" | grep '^data\.tar') || return 1
    case "$member" in
      *.xz) ar p "$1" "$member" | tar -xJ -C "$2" ;;
      *.zst) ar p "$1" "$member" | zstd -dc | tar -x -C "$2" ;;
      *.gz) ar p "$1" "$member" | tar -xz -C "$2" ;;
      *) return 1 ;;
    esac
  fi
}

deb_root=""
if ls "$repo"/.debs/*.deb >/dev/null 2>&1; then
  deb_root="$build/debs-root"
  stamp="$deb_root/.unpacked"
  listing=$(cd "$repo/.debs" && ls ./*.deb | sort)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$listing" ]; then
    rm -rf "$deb_root"
    mkdir -p "$deb_root"
    for f in "$repo"/.debs/*.deb; do unpack_deb "$f" "$deb_root" || die "cannot unpack $f"; done
    # links to absolute paths (zlib1g-dev's libz.so -> /lib/...) must point inside the prefix
    while IFS= read -r link; do
      target=$(readlink "$link")
      case "$target" in /*) ln -sfn "$deb_root$target" "$link" ;; esac
    done < <(find "$deb_root" -type l)
    echo "$listing" >"$stamp"
  fi
  libdirs="$deb_root/usr/lib/x86_64-linux-gnu:$deb_root/lib/x86_64-linux-gnu:$deb_root/usr/lib"
  export CMAKE_PREFIX_PATH="$deb_root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  # the multiarch folder too: jconfig.h (JPEG_LIB_VERSION) and openssl's configuration.h live there, and
  # the machine's own (Ubuntu's libjpeg-turbo8: version 80) would pair with the packages' libjpeg.so.62
  export CPATH="$deb_root/usr/include/x86_64-linux-gnu:$deb_root/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$libdirs${LIBRARY_PATH:+:$LIBRARY_PATH}"
  # pkg-config (re2) sees the unpacked packages' .pc files only; their includedir and libdir name /usr
  # itself (re2.pc does not derive them from its prefix), so the sysroot maps them into the prefix
  export PKG_CONFIG_LIBDIR="$deb_root/usr/lib/x86_64-linux-gnu/pkgconfig:$deb_root/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$deb_root"
  trainer_ld_path="$libdirs"
  say "Debian libraries: $(ls "$repo"/.debs/*.deb | wc -l) packages from .debs/ unpacked into $deb_root"
elif have_system_libs; then
  trainer_ld_path=""
  say "Debian libraries: the machine's own (/usr/include)"
else
  die "the project's C++ libraries (yaml-cpp, spdlog, fmt, CLI11, Catch2, nlohmann-json, gloo headers, ...) are
  missing here and there is no .debs/ folder: run scripts/fetch_device_debs.sh on the build machine and carry .debs"
fi

# --- 3. configure and build ------------------------------------------------------------------------
# NCCL's header (c10d's ProcessGroupNCCL.hpp includes it): the CUDA toolkit's where it has one, else
# the nvidia-nccl wheel's beside torch (CPATH comes after the -isystem folders)
torch_site=$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
if [ -f "$torch_site/nvidia/nccl/include/nccl.h" ]; then
  export CPATH="${CPATH:+$CPATH:}$torch_site/nvidia/nccl/include"
fi
say "compiler: $(c++ --version 2>/dev/null | head -1); nvcc: $(nvcc --version 2>/dev/null | tail -1)"
gpu_test_areas=$(grep -l '\[gpu\]' "$repo"/tests/*/*.cpp 2>/dev/null | xargs -r -n1 dirname | xargs -r -n1 basename | sort -u)
targets=(trainer)
for area in $gpu_test_areas; do targets+=("test_$area"); done
say "configuring $build (Release, Ninja)"
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$torch_prefix/Torch" \
  -DTRAINER_BUILD_TESTS=ON >"$build/configure.log" 2>&1 || { tail -30 "$build/configure.log"; die "cmake configure (log: $build/configure.log)"; }
for dep in yaml-cpp spdlog fmt Catch2; do
  grep -m1 "^${dep}_DIR:" "$build/CMakeCache.txt" | sed "s/^/[device_check] found /"
done
# ninja tracks files, not the environment: a build made with other include folders is cleaned first
env_stamp="$build/.include-env"
if [ -f "$env_stamp" ] && [ "$(cat "$env_stamp")" != "${CPATH:-}|${LIBRARY_PATH:-}" ]; then
  say "include folders changed since the last build: cleaning $build"
  cmake --build "$build" --target clean >/dev/null 2>&1
fi
echo "${CPATH:-}|${LIBRARY_PATH:-}" >"$env_stamp"
say "building ${targets[*]} with $jobs jobs"
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/build.log" 2>&1 ||
  { grep -m20 -B2 -A6 'error' "$build/build.log"; die "build (log: $build/build.log)"; }
say "built ${targets[*]}"

# the trainer's own run-time libraries from .debs, for its processes only (python keeps the system's)
trainer_bin="$build/trainer"
if [ -n "$trainer_ld_path" ]; then
  trainer_bin="$build/trainer-with-debs"
  printf '#!/usr/bin/env bash\nexport LD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\nexec "%s" "$@"\n' \
    "$trainer_ld_path" "$build/trainer" >"$trainer_bin"
  chmod +x "$trainer_bin"
fi
"$trainer_bin" --version >/dev/null 2>&1 || die "the built trainer does not start: $("$trainer_bin" --version 2>&1 | tail -3)"

# --- 4. is there a GPU? ----------------------------------------------------------------------------
cuda_count=$("$py" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)
if [ "${cuda_count:-0}" -lt 1 ]; then
  say "no CUDA device: trainer built against LibTorch $torch_version; stopping before the [gpu] tests and the GPU benchmark"
  [ "${DEVICE_CHECK_REQUIRE_GPU:-0}" = 1 ] && exit 2
  exit 0
fi
gpu=$("$py" -c 'import torch; print(torch.cuda.get_device_name(0))')
say "CUDA: $cuda_count device(s), $gpu"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# --- 5. the [gpu] tests ----------------------------------------------------------------------------
status=0
if ! section_on tests; then
  say "[gpu] tests not in DEVICE_CHECK_SECTIONS"
elif [ -z "$gpu_test_areas" ]; then
  say "no [gpu] tests in tests/ (no TEST_CASE is tagged [gpu])"
else
  for area in $gpu_test_areas; do
    say "test_$area [gpu]"
    LD_LIBRARY_PATH="$trainer_ld_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 240 \
      "$build/tests/test_$area" '[gpu]' >"$results/gpu_tests_$area.log" 2>&1
    rc=$?
    tail -3 "$results/gpu_tests_$area.log"
    # 77: every [gpu] case skipped itself (TRAINER_SKIP, tests/skip.hpp): LibTorch sees no CUDA device
    # although PyTorch does (a CPU-only LibTorch build?); on this machine that is a failure, not a pass
    if [ $rc -eq 77 ]; then
      say "test_$area [gpu]: every case skipped itself (no CUDA device for the C++ tests): FAILED"; status=1
    elif [ $rc -ne 0 ]; then
      say "test_$area [gpu] FAILED ($rc)"; status=1
    fi
  done
fi

# --- 6. the input pipeline on this node's cores ------------------------------------------------------
# feed: ResNet-50 bf16 fed from JPEGs by the trainer's loader (uint8 batches normalised on the GPU) and
# by torchvision's DataLoader, next to the trainer's synthetic-data rate (scripts/bench/bench_feed.py);
# input: the pipelines alone, trainer bench-data vs torchvision at 1, 4 and all cores' workers
# (scripts/bench/bench_input.py): the per-core figures a 2-core machine cannot give at 16 workers.
cores=$(nproc)
feed_workers=$(( cores >= 16 ? 16 : cores ))
jpeg_dir="$build/jpeg-folder"
# A benchmark section: its command under a slice of what is left of the budget (at most CAP s),
# skipped with under MIN s left; a failure or a timeout fails the check.
timed_section() {  # NAME CAP MIN WHAT COMMAND...
  local name=$1 cap=$2 min=$3 what=$4 slice
  shift 4
  section_on "$name" || return 0
  slice=$(( budget - $(elapsed) - 5 )); [ $slice -gt "$cap" ] && slice=$cap
  if [ $slice -lt "$min" ]; then say "$name section skipped: ${slice}s left"; return 0; fi
  say "$name: $what ($slice s at most)"
  PYTHONUNBUFFERED=1 timeout "$slice" "$@" || { say "$name section FAILED or ran out of time"; status=1; }
}
# shellcheck disable=SC2086  # DEVICE_CHECK_FEED_ARGS: several arguments
timed_section feed 240 90 "ResNet-50 bf16 from JPEGs, $(( feed_workers / 2 )) and $feed_workers workers" \
  "$py" "$repo/scripts/bench/bench_feed.py" --trainer "$trainer_bin" --python "$py" \
  --work "$jpeg_dir" --images 4096 --workers "$(( feed_workers / 2 )),$feed_workers" --timeout 120 \
  --markdown "$results/bench_feed.md" --json "$results/bench_feed.json" ${DEVICE_CHECK_FEED_ARGS:-}
timed_section input 150 60 "trainer bench-data vs torchvision DataLoader, 1, 4 and $feed_workers workers" \
  "$py" "$repo/scripts/bench/bench_input.py" --trainer "$trainer_bin" \
  --work "$jpeg_dir" --images 4096 --workers "1,4,$feed_workers" --batches 24 --repeats 1 \
  --out "$results/bench_input.md"

# --- 7. the GPU benchmark, one section at a time --------------------------------------------------
# compare (GPT-2 124M, ResNet-50 vs PyTorch eager) first, then graphs (ResNet-18-CIFAR without / with
# train.cuda_graphs): each section writes its own report, so a section cut short by the budget does
# not take the other's figures with it.
left=$(( budget - $(elapsed) ))
if [ -n "${DEVICE_CHECK_BENCH_SIZE:-}" ]; then
  case "$DEVICE_CHECK_BENCH_SIZE" in
    quick) size=(--quick) ;;
    [0-9]*) size=(--rounds "$DEVICE_CHECK_BENCH_SIZE") ;;
    *) die "DEVICE_CHECK_BENCH_SIZE: quick or a number of rounds, not '$DEVICE_CHECK_BENCH_SIZE'" ;;
  esac
elif [ $left -ge 400 ]; then
  size=(--rounds 2)
elif [ $left -ge 200 ]; then
  # the full step counts once per side: a run cut by its timeout leaves no figure at all
  say "only ${left}s of the ${budget}s budget left: one round per side"
  size=(--rounds 1)
elif [ $left -ge 120 ]; then
  say "only ${left}s of the ${budget}s budget left: the short benchmark (--quick)"
  size=(--quick)
else
  say "only ${left}s of the ${budget}s budget left: GPU benchmark skipped"
  size=()
fi
for section in compare graphs; do
  [ ${#size[@]} -eq 0 ] && break
  section_on "$section" || continue
  left=$(( budget - $(elapsed) - 5 ))
  # compare may take up to two thirds of what is left; graphs gets the rest
  [ "$section" = compare ] && slice=$(( left * 2 / 3 )) || slice=$left
  if [ $slice -lt 45 ]; then
    say "benchmark section $section skipped: ${slice}s left"
    continue
  fi
  bench=(--device cuda --only "$section" "${size[@]}" --trainer "$trainer_bin" --python "$py"
         --work-dir "$build/bench-cuda" --json "$results/bench_cuda_$section.json"
         --markdown "$results/bench_cuda_$section.md")
  say "benchmark ($slice s at most): bench_train.py ${bench[*]}"
  PYTHONUNBUFFERED=1 timeout "$slice" "$py" "$repo/scripts/bench/bench_train.py" "${bench[@]}" || {
    say "benchmark section $section FAILED or ran out of time"; status=1; }
done
# The GPT-2 124M config of the sharding, tensor-parallel and pipeline sections (written once).
gpt2_config() {
  full_cfg="$build/sharding_full_gpt2.yaml"
  cat >"$full_cfg" <<'YAML'
run: {name: gpt2_full, seed: 1}
model: {arch: gpt, vocab_size: 50304, block_size: 1024, n_layer: 12, n_head: 12, n_embd: 768, dropout: 0.0, bias: false}
data: {format: synthetic, workers: 2, synthetic: {num_samples: 4096, val_samples: 8}}
train: {batch_size: 8, max_steps: 20, precision: bf16, grad_clip: 1.0, device: cuda, log_every: 1, eval_every: 0}
optim: {name: adamw, lr: 6.0e-4, weight_decay: 0.1}
checkpoint: {every_steps: 0}
log: {progress: "off", tensorboard: false}
YAML
}

# --- 8. dist.sharding full: GPT-2 124M ---------------------------------------------------------------
# What the CPU tests cannot show: the per-unit all-gathers, storage frees and prefetches on CUDA
# (the caching allocator, NCCL streams) give none's losses. One GPU is a world of one: full = none.
left=$(( budget - $(elapsed) - 5 ))
if ! section_on sharding; then
  :
elif [ $left -lt 60 ]; then
  say "dist.sharding full check skipped: ${left}s left"
else
  gpt2_config
  full_ranks=1
  full_launch=("$trainer_bin")
  if [ "${cuda_count:-0}" -ge 2 ]; then full_ranks=2; full_launch=("$trainer_bin" launch -n 2 --); fi
  say "dist.sharding none and full, GPT-2 124M on $full_ranks rank(s) ($(( left / 2 ))s each at most)"
  for mode in none full; do
    timeout $(( left / 2 )) "${full_launch[@]}" run "$full_cfg" --force --resume never --set dist.sharding=$mode \
      --out-dir "$build/sharding-full/$mode" >"$results/sharding_full_$mode.log" 2>&1 ||
      { say "dist.sharding $mode on $full_ranks rank(s) FAILED (log: $results/sharding_full_$mode.log)"; status=1; }
  done
  # bf16 with grad_clip: the sharded norm differs in its last bits, bf16 rounding amplifies it; a
  # world of one differs only by non-deterministic CUDA kernels
  "$py" "$repo/scripts/bench/compare_runs.py" "$build/sharding-full" none full --run gpt2_full --steps 20 --tol 1e-2 \
    --show param_bytes grad_bytes optim_state_bytes --label "full vs none on $full_ranks rank(s)" |
    tee "$results/sharding_full.txt" || status=1
fi
# --- 9. tensor parallel: GPT-2 124M ----------------------------------------------------------------
# Two GPUs: tp 2 over NCCL (the region all-reduces, the vocab-parallel loss on CUDA) against one rank
# of the same global batch. One GPU: dist.tensor_parallel 1 stated explicitly is today's path at no
# cost: no tp_comm_ms in its records, its losses those of step 8's none run.
left=$(( budget - $(elapsed) - 5 ))
if ! section_on tp; then
  :
elif [ $left -lt 60 ] || [ ! -f "${full_cfg:-}" ]; then
  say "tensor parallel check skipped: ${left}s left or no step 8 config"
else
  tp_args=("$trainer_bin" run "$full_cfg" --force --resume never --set dist.tensor_parallel=1)
  tp_ranks=1
  if [ "${cuda_count:-0}" -ge 2 ]; then
    tp_ranks=2
    tp_args=("$trainer_bin" launch -n 2 -- run "$full_cfg" --force --resume never --set dist.tensor_parallel=2
             --set train.batch_size=16)
    # the baseline: one rank with the whole global batch (tp 2 is one data-parallel rank of 16)
    timeout $(( left / 2 )) "$trainer_bin" run "$full_cfg" --force --resume never --set train.batch_size=16 \
      --out-dir "$build/tp/base" >"$results/tp_base.log" 2>&1 ||
      { say "tensor parallel baseline FAILED (log: $results/tp_base.log)"; status=1; }
  else
    mkdir -p "$build/tp" && rm -rf "$build/tp/base" && cp -r "$build/sharding-full/none" "$build/tp/base"
  fi
  say "tensor parallel $tp_ranks against one rank, GPT-2 124M"
  timeout $(( left / 2 )) "${tp_args[@]}" --out-dir "$build/tp/tp" >"$results/tp_tp.log" 2>&1 ||
    { say "tensor parallel $tp_ranks FAILED (log: $results/tp_tp.log)"; status=1; }
  # bf16: the tp layout rounds its partial sums differently; tp 1 must run no tp collective
  absent=(); [ "$tp_ranks" = 1 ] && absent=(--absent tp_comm_ms)
  "$py" "$repo/scripts/bench/compare_runs.py" "$build/tp" base tp --run gpt2_full --steps 20 --tol 1e-2 --show tp_comm_ms \
    "${absent[@]}" --label "tp $tp_ranks vs one rank" | tee "$results/tensor_parallel.txt" || status=1
fi
# --- 10. pipeline parallel in fp16: GPT-2 124M ------------------------------------------------------
# The loss scale rides the gradients between the stages; an overflow on either stage skips the step
# on both. Both ranks on cuda:0 (two nodes of one local rank each, Gloo): one GPU is enough to run it.
left=$(( budget - $(elapsed) - 5 ))
if ! section_on pp; then
  :
elif [ $left -lt 60 ]; then
  say "pipeline parallel fp16 check skipped: ${left}s left"
else
  gpt2_config
  say "pipeline parallel 2 in fp16 on cuda:0 (two ranks, Gloo) against one process, GPT-2 124M"
  PYTHON="$py" "$repo/scripts/bench/pp_shared_device.sh" "$trainer_bin" "$full_cfg" "$build/pp" cuda fp16 20 2e-2 \
    $(( left / 2 - 5 )) | tee "$results/pipeline_fp16.txt" || status=1
fi
say "done in $(elapsed)s (status $status); results in $results"
exit $status
