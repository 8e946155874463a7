#!/usr/bin/env bash
# Fetches XGrammar 0.2.9 (Apache-2.0, the grammar engine behind structured outputs) from its PyPI
# sdist, checks its sha256 and builds its C++ core as a static library, outside the repository so
# that nothing of it is committed and a fresh CI clone reuses the cache:
#   $KVASIR_XGRAMMAR_DIR (default ~/.cache/kvasir/xgrammar-0.2.9)/src              the unpacked sdist
#   $KVASIR_XGRAMMAR_DIR/build-<variant>/libxgrammar.a                             one per variant
# Usage: scripts/fetch_xgrammar.sh [plain|asan|tsan|asan-gcc|tsan-gcc]...   (no argument: plain)
#   plain  the default compiler, Release: what scripts/build.sh links
#   asan   clang, ASan+UBSan and libFuzzer coverage: what -DKVASIR_SANITIZE=ON / -DKVASIR_FUZZ=ON link
#          (so the fuzz targets see XGrammar's parsers and ASan checks its memory accesses)
#   tsan   clang, ThreadSanitizer: what -DKVASIR_TSAN=ON links (uninstrumented code hides the
#          happens-before edges of its atomics and futures from TSan: false reports)
#   asan-gcc, tsan-gcc  the same with g++ (no fuzzer coverage), for sanitizer builds made with GCC:
#          a sanitizer runtime must come from the compiler that instrumented the code
# scripts/xgrammar-patches/*.patch are applied to the unpacked sdist (fixes that keep generated
# JSON valid; each patch says why). Kvasir's CMake (cmake/xgrammar.cmake) runs this at configure time for the variant it needs;
# scripts/setup.sh runs it for plain. Idempotent: a variant whose stamp (flags, compiler) matches
# is not rebuilt, and the sdist is downloaded once. Concurrent runs serialize on a lock file.
set -euo pipefail

version=0.2.9
url="https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-${version}.tar.gz"
sha=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
dir="${KVASIR_XGRAMMAR_DIR:-$HOME/.cache/kvasir/xgrammar-$version}"
patches_dir="$(cd "$(dirname "$0")" && pwd)/xgrammar-patches"
patches_sha=$(cat "$patches_dir"/*.patch 2>/dev/null | sha256sum | cut -d' ' -f1)
jobs="${KVASIR_JOBS:-2}"

[ $# -gt 0 ] || set -- plain
for v in "$@"; do
  case "$v" in
    plain | asan | tsan | asan-gcc | tsan-gcc) ;;
    *) echo "usage: scripts/fetch_xgrammar.sh [plain|asan|tsan|asan-gcc|tsan-gcc]..." >&2; exit 2 ;;
  esac
done

mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9

fetch_source() {
  [ "$(cat "$dir/src/.kvasir-unpacked" 2>/dev/null)" = "$patches_sha" ] && return 0
  local tarball="$dir/xgrammar-$version.tar.gz" got
  if [ ! -f "$tarball" ] || [ "$(sha256sum "$tarball" | cut -d' ' -f1)" != "$sha" ]; then
    echo "fetch_xgrammar: downloading xgrammar $version sdist" >&2
    if command -v curl >/dev/null; then
      curl -fsSL --retry 3 -o "$tarball.tmp" "$url"
    else
      python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
        "$url" "$tarball.tmp"
    fi
    got=$(sha256sum "$tarball.tmp" | cut -d' ' -f1)
    [ "$got" = "$sha" ] || { rm -f "$tarball.tmp"; echo "sha256 mismatch for xgrammar sdist: $got" >&2; exit 1; }
    mv "$tarball.tmp" "$tarball"
  fi
  rm -rf "$dir/src" "$dir/src.tmp"
  mkdir -p "$dir/src.tmp"
  tar -xzf "$tarball" -C "$dir/src.tmp" --strip-components=1
  local p
  for p in "$patches_dir"/*.patch; do
    [ -f "$p" ] || continue
    patch -d "$dir/src.tmp" -p1 --forward --batch --quiet <"$p" ||
      { echo "fetch_xgrammar: $(basename "$p") does not apply" >&2; exit 1; }
  done
  echo "$patches_sha" >"$dir/src.tmp/.kvasir-unpacked"
  mv "$dir/src.tmp" "$dir/src"
}

# Its CMakeLists prepends -Werror and -flto=auto to CMAKE_CXX_FLAGS; ours come after and win
# (an LTO static library would tie every consumer to one compiler's bitcode).
flags_for() {
  local base="-fno-lto -Wno-error"
  case "$1" in
    plain) echo "$base" ;;
    asan) echo "$base -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" ;;
    asan-gcc) echo "$base -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" ;;
    tsan | tsan-gcc) echo "$base -g -fno-omit-frame-pointer -fsanitize=thread" ;;
  esac
}
compiler_for() {
  case "$1" in
    plain) echo "${KVASIR_XGRAMMAR_CXX:-c++}" ;;
    *-gcc) echo g++ ;;
    *) echo clang++ ;;
  esac
}

build_variant() {
  local v=$1 b="$dir/build-$1" cxx flags stamp launcher=()
  cxx=$(compiler_for "$v")
  flags=$(flags_for "$v")
  stamp="xgrammar $version | patches $patches_sha | $v | $(command -v "$cxx") $("$cxx" --version | head -n 1) | $flags"
  if [ -f "$b/libxgrammar.a" ] && [ "$(cat "$b/.kvasir-stamp" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  echo "fetch_xgrammar: building the $v variant in $b (a few minutes)" >&2
  rm -rf "$b"
  mkdir -p "$b"
  # A config.cmake in the build directory takes precedence over cmake/config.cmake, which turns
  # the Python bindings on.
  cat >"$b/config.cmake" <<'EOF'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
EOF
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  local build_type=Release
  [ "$v" = plain ] || build_type=RelWithDebInfo
  cmake -S "$dir/src" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_FLAGS="$flags" "${launcher[@]}" >"$b/configure.log" 2>&1 ||
    { tail -n 30 "$b/configure.log" >&2; exit 1; }
  ninja -C "$b" -j"$jobs" xgrammar >"$b/build.log" 2>&1 || { tail -n 40 "$b/build.log" >&2; exit 1; }
  echo "$stamp" >"$b/.kvasir-stamp"
}

fetch_source
for v in "$@"; do build_variant "$v"; done
