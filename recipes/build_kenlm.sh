#!/usr/bin/env bash
# Build KenLM's command-line tools (lmplz, build_binary, query) from the kenlm source
# distribution on PyPI, into tools/kenlm/bin (git-ignored). Idempotent: does nothing when the
# binaries are already there.
#
# Needs (Debian/Ubuntu):
#   apt-get install libboost-program-options-dev libboost-system-dev libboost-thread-dev \
#                   libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev cmake g++
#
# Usage: recipes/build_kenlm.sh [PREFIX]   (PREFIX defaults to tools/kenlm)
# asrdecode.lm.estimate_arpa finds lmplz in $ASRDECODE_KENLM_BIN, tools/kenlm/bin, or on PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${1:-$ROOT/tools/kenlm}"
BIN="$PREFIX/bin"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-2}"

if [[ -x "$BIN/lmplz" && -x "$BIN/build_binary" ]]; then
    echo "kenlm: $BIN/lmplz and $BIN/build_binary already built"
    exit 0
fi

PKGS=(libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev
      zlib1g-dev libbz2-dev liblzma-dev cmake g++)
echo "kenlm: needs the Debian packages: ${PKGS[*]}"
missing=()
for pkg in "${PKGS[@]}"; do
    if command -v dpkg-query >/dev/null 2>&1; then
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    echo "kenlm: missing Debian packages: ${missing[*]}" >&2
    echo "kenlm: install them with: apt-get install ${missing[*]}" >&2
    exit 1
fi
for tool in cmake make c++; do
    command -v "$tool" >/dev/null 2>&1 || { echo "kenlm: '$tool' not found on PATH" >&2; exit 1; }
done

mkdir -p "$PREFIX"
# The whole prefix is build output: keep it out of git without touching the repo's .gitignore.
echo "*" > "$PREFIX/.gitignore"

SRC="$PREFIX/src"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    DL="$PREFIX/download"
    rm -rf "$DL" "$SRC"
    mkdir -p "$DL"
    echo "kenlm: downloading the source distribution from PyPI"
    # Fetch the sdist file from PyPI's simple index: `pip download --no-binary` would first build
    # the package's metadata, which needs its build requirements installed.
    "$PYTHON" - "$DL" <<'PY'
import re, sys, urllib.parse, urllib.request
from pathlib import Path
index = "https://pypi.org/simple/kenlm/"
with urllib.request.urlopen(index, timeout=120) as r:
    page = r.read().decode()
links = re.findall(r'href="([^"]*kenlm-0\.3\.0\.tar\.gz[^"]*)"', page)
if not links:
    sys.exit("kenlm: no kenlm-0.3.0.tar.gz on " + index)
url = urllib.parse.urljoin(index, links[0].replace("&amp;", "&"))
with urllib.request.urlopen(url, timeout=300) as r:
    (Path(sys.argv[1]) / "kenlm-0.3.0.tar.gz").write_bytes(r.read())
PY
    archive="$(find "$DL" -maxdepth 1 \( -name 'kenlm-*.tar.gz' -o -name 'kenlm-*.zip' \) | head -n1)"
    [[ -n "$archive" ]] || { echo "kenlm: pip download produced no archive in $DL" >&2; exit 1; }
    mkdir -p "$PREFIX/unpack"
    case "$archive" in
        *.zip) (cd "$PREFIX/unpack" && "$PYTHON" -m zipfile -e "$archive" .) ;;
        *) tar -xzf "$archive" -C "$PREFIX/unpack" ;;
    esac
    top="$(find "$PREFIX/unpack" -maxdepth 2 -name CMakeLists.txt -printf '%h\n' | head -n1)"
    [[ -n "$top" ]] || { echo "kenlm: no CMakeLists.txt in $archive" >&2; exit 1; }
    mv "$top" "$SRC"
    rm -rf "$PREFIX/unpack" "$DL"
fi

BUILD="$PREFIX/build"
mkdir -p "$BUILD"
echo "kenlm: configuring in $BUILD"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKENLM_MAX_ORDER=8 >"$BUILD/cmake.log" 2>&1 \
    || { tail -n 40 "$BUILD/cmake.log" >&2; exit 1; }
echo "kenlm: building lmplz, build_binary, query with $JOBS jobs"
cmake --build "$BUILD" --target lmplz build_binary query -- -j"$JOBS" >"$BUILD/make.log" 2>&1 \
    || { tail -n 40 "$BUILD/make.log" >&2; exit 1; }

mkdir -p "$BIN"
for tool in lmplz build_binary query; do
    cp "$BUILD/bin/$tool" "$BIN/$tool"
done
echo "kenlm: built $BIN/lmplz $BIN/build_binary $BIN/query"
