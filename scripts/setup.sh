#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for trainer, then configures build/ (Release) and builds the
# trainer binary: what the quickstart needs. scripts/test.sh builds the test programs (and the
# benchmarks' helpers) before it runs them; `scripts/setup.sh --all` builds them here.
# Idempotent and quick when everything is already there. Options (environment variables):
#   Torch_DIR=/path/to/libtorch/share/cmake/Torch   use your own LibTorch; no Python environment needed
#   TRAINER_VENV=/path                                where the pinned torch wheel lives
#                                                     (default ~/.cache/trainer/venv-torch-<version>)
#   TRAINER_SKIP_APT=1 / TRAINER_SKIP_BUILD=1         skip the Debian packages / the build
#   TRAINER_BUILD_DIR=build                           build folder (default build)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
TORCH_VERSION=2.11.0        # the pinned LibTorch (torch wheel; CUDA 13.0 build)
TORCHVISION_VERSION=0.26.0  # matches torch 2.11; tests and benchmarks only
venv=${TRAINER_VENV:-$HOME/.cache/trainer/venv-torch-$TORCH_VERSION}
build_dir=${TRAINER_BUILD_DIR:-$repo/build}
log() { printf '[setup] %s\n' "$*"; }
# the real program's path: ninja reads a bare `trainer` as build/trainer, the front's file, which
# alone does not build the program (CMakeLists.txt); libexec/trainer builds both
targets=(--target libexec/trainer)
what="the trainer binary"
for a in "$@"; do
  case "$a" in
    --all) targets=(); what="everything" ;;
    *) echo "setup.sh: unknown option $a (known: --all)" >&2; exit 2 ;;
  esac
done

# --- Debian packages: exactly what the project uses ------------------------------------------------
packages=(
  build-essential cmake ninja-build pkg-config python3-venv
  libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev catch2 nlohmann-json3-dev
  libssl-dev zlib1g-dev libre2-dev libjpeg62-turbo-dev libpng-dev libgloo-dev
  openmpi-bin libopenmpi-dev
  slurmctld slurmd slurm-client munge iproute2
  dataset-fashion-mnist fortunes
)
if [ "${TRAINER_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
    $sudo_cmd apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    log "Debian packages: all present"
  fi
fi

# --- LibTorch: the pinned torch wheel in a Python environment outside the clone -----------------------
cmake_args=()
if [ -n "${Torch_DIR:-}" ]; then
  log "LibTorch: Torch_DIR=$Torch_DIR (your own)"
  cmake_args+=("-DTorch_DIR=$Torch_DIR")
else
  want="torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION safetensors tensorboard numpy"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$TORCH_VERSION" <<'PY' 2>/dev/null
import sys, torch, torchvision, safetensors, tensorboard, numpy
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] else 1)
PY
  then
    log "LibTorch: torch $TORCH_VERSION present in $venv"
  else
    log "LibTorch: installing torch $TORCH_VERSION (+ test-only torchvision, safetensors, tensorboard) into $venv"
    log "          (a CUDA build, several GB, downloaded once and reused by every clone)"
    mkdir -p "$(dirname "$venv")"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q $want
  fi
  cmake_args+=("-DTRAINER_VENV=$venv")
fi

# --- data that the shipped configs read -----------------------------------------------------------------
if [ ! -s "$repo/data/generated/fortunes.txt" ] && [ -d /usr/share/games/fortunes ]; then
  "$repo/data/prepare_fortunes.sh"
fi

# --- configure and build ---------------------------------------------------------------------------------
if [ "${TRAINER_SKIP_BUILD:-0}" != 1 ]; then
  if [ ! -f "$build_dir/build.ninja" ]; then
    log "configuring $build_dir (Release)"
    mkdir -p "$build_dir"
    cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" > "$build_dir/configure.log" 2>&1 \
      || { cat "$build_dir/configure.log"; exit 1; }
  fi
  log "building $build_dir: $what (README.md gives the clean build's time)"
  start=$(date +%s)
  cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
  log "build done in $(( $(date +%s) - start )) s: $build_dir/trainer"
fi
