#!/usr/bin/env bash
# Downloads into .debs/ (git-ignored) the Debian 12 packages that scripts/device_check.sh unpacks on a
# GPU machine that has PyTorch, CMake, ninja and a compiler but not the project's C++ libraries.
# Exactly the build's dependencies (cmake/TrainerDeps.cmake, tests/CMakeLists.txt, src/dist's gloo
# headers) and the shared libraries the trainer loads at run time; nothing else.
# Usage: bash scripts/fetch_device_debs.sh [DEST]      (DEST: default <repo>/.debs)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$repo/.debs}

packages=(
  libyaml-cpp-dev libyaml-cpp0.7         # config parsing
  libcli11-dev                           # command line (header-only)
  libspdlog-dev libspdlog1.10            # logging
  libfmt-dev libfmt9                     # spdlog's and our formatting
  nlohmann-json3-dev                     # metrics, manifests (header-only)
  catch2                                 # unit tests (v2, header-only)
  libssl-dev libssl3                     # sha256
  zlib1g-dev zlib1g                      # gzip'd IDX files
  libjpeg62-turbo-dev libjpeg62-turbo    # image_folder JPEG
  libpng-dev libpng16-16                 # image_folder PNG
  libgloo-dev                            # headers c10d's ProcessGroupGloo.hpp includes (no library linked)
  libre2-dev libre2-9                    # the config's user-named patterns (config::NamePattern)
)

command -v apt-get >/dev/null || { echo "fetch_device_debs: apt-get not found (a Debian 12 machine is needed)" >&2; exit 1; }
mkdir -p "$dest"
cd "$dest"
rm -f ./*.deb
# apt-get download needs the package lists; an empty cache gives "Unable to locate package"
if ! apt-get download "${packages[@]}"; then
  echo "fetch_device_debs: apt-get download failed; run 'apt-get update' once and retry" >&2
  exit 1
fi
count=$(ls ./*.deb | wc -l)
if [ "$count" -ne "${#packages[@]}" ]; then
  echo "fetch_device_debs: expected ${#packages[@]} .deb files in $dest, found $count" >&2
  exit 1
fi
echo "fetch_device_debs: $count packages ($(du -sh . | cut -f1)) in $dest; carry '.debs' to the device machine"
