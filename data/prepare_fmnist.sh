#!/usr/bin/env bash
# Locates Fashion-MNIST for data.format idx. The data comes from Debian's dataset-fashion-mnist
# package (apt-get install dataset-fashion-mnist); nothing is downloaded here.
# Usage: data/prepare_fmnist.sh [FOLDER]   (default /usr/share/datasets/fashion-mnist)
# Prints the folder to use as data.path and exits 0, or says what is missing and exits 1.
set -euo pipefail
dir="${1:-/usr/share/datasets/fashion-mnist}"
missing=0
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [[ -f "$dir/$f.gz" || -f "$dir/$f" ]]; then
    echo "found $(ls "$dir/$f"* | head -n1)"
  else
    echo "missing $dir/$f[.gz]" >&2
    missing=1
  fi
done
if [[ $missing -ne 0 ]]; then
  echo "Fashion-MNIST not found in $dir: install it with 'apt-get install dataset-fashion-mnist'" >&2
  echo "(or pass the folder holding the four IDX files)" >&2
  exit 1
fi
echo "data.path: $dir   (data.format: idx; validation uses the t10k files)"
