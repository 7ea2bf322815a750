#!/usr/bin/env bash
# Builds the character-level text corpus for configs/gpt_char.yaml from Debian's `fortunes` package
# (English fortune cookies, about 2.4 MB of text without the ASCII-art collections).
# Output: data/generated/fortunes.txt (deterministic: files in sorted order, '%' separators dropped).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${FORTUNES_DIR:-/usr/share/games/fortunes}
out=$here/generated/fortunes.txt
if [ ! -d "$src" ]; then
  echo "prepare_fortunes: $src not found; install it with: apt-get install fortunes" >&2
  exit 1
fi
mkdir -p "$here/generated"
tmp=$(mktemp "$out.XXXXXX")
# plain-text collections only: no .dat indexes, no .u8 links, no ASCII art
find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' ! -name 'art' ! -name 'ascii-art' -print0 \
  | sort -z | xargs -0 cat | grep -v '^%$' > "$tmp"
mv "$tmp" "$out"
echo "prepare_fortunes: wrote $out ($(wc -c < "$out") bytes)"
