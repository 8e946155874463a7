#!/usr/bin/env bash
# Builds a reference llama.cpp OUTSIDE the repo from the PyPI sdist of llama-cpp-python (which
# vendors llama.cpp), and runs llama-bench for comparison. Two variants share the source: the CPU
# build (default) and a CUDA build (KVASIR_LLAMACPP_CUDA=1: sm_90a only, static ggml, libstdc++
# linked statically, so the binaries run on the H200 device machine next to libcudart/libcublas).
#
# Usage:
#   scripts/llamacpp.sh build                 # idempotent; skips when already built
#   KVASIR_LLAMACPP_CUDA=1 scripts/llamacpp.sh build   # CUDA variant in $ROOT/build-cuda
#   scripts/llamacpp.sh pack TARBALL          # the source trimmed to what the build needs (~6 MB
#                                             # compressed), to build the CUDA variant on the GPU
#                                             # machine: extract as $KVASIR_LLAMACPP_DIR/src there
#   scripts/llamacpp.sh bench MODEL THREADS   # llama-bench -p 128 -n 128 -r 5 -o json
#   scripts/llamacpp.sh path                  # prints the bin dir
#
# Env:
#   KVASIR_LLAMACPP_DIR  root of the build (default ~/.cache/kvasir/llama.cpp)
#   LLAMACPP_PY_VERSION  pin a llama-cpp-python version (default: latest sdist)
#   JOBS                 parallel build jobs (default 2)
#   KVASIR_LLAMACPP_AMX  1 = allow AMX kernels (see cpu_flags below; default off when AMX present)
set -euo pipefail

ROOT="${KVASIR_LLAMACPP_DIR:-$HOME/.cache/kvasir/llama.cpp}"
SRC="$ROOT/src"
CUDA_MODE="${KVASIR_LLAMACPP_CUDA:-0}"
if [[ "$CUDA_MODE" == "1" ]]; then
  BUILD="$ROOT/build-cuda"
  STAMP="$ROOT/.built-cuda"
  TARGETS=(llama-bench llama-batched-bench)
else
  BUILD="$ROOT/build"
  STAMP="$ROOT/.built"
  TARGETS=(llama-bench llama-batched-bench llama-server llama-cli)
fi
BIN="$BUILD/bin"
JOBS="${JOBS:-2}"

log() { echo "[llamacpp.sh] $*" >&2; }

# CPU flags. Default: GGML_NATIVE=ON (-march=native). Exception: when the CPU advertises AMX,
# -march=native makes ggml use AMX tile kernels, which die with SIGILL on VMs that advertise AMX
# but do not really support it (seen on this project's Firecracker dev box: `tilezero` ->
# invalid opcode). There we build with GGML_NATIVE=OFF and turn on every x86 ISA extension the
# CPU has except AMX. KVASIR_LLAMACPP_AMX=1 keeps plain -march=native.
cpu_flags() {
  local flags
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  if [[ "$(uname -m)" != "x86_64" || "$flags" != *" amx_int8 "* || "${KVASIR_LLAMACPP_AMX:-0}" == "1" ]]; then
    echo "-DGGML_NATIVE=ON"
    return
  fi
  has() { [[ "$flags" == *" $1 "* ]] && echo ON || echo OFF; }
  local avx512=OFF
  if [[ $(has avx512f) == ON && $(has avx512bw) == ON && $(has avx512dq) == ON && $(has avx512vl) == ON && $(has avx512cd) == ON ]]; then
    avx512=ON
  fi
  echo "-DGGML_NATIVE=OFF -DGGML_SSE42=$(has sse4_2) -DGGML_AVX=$(has avx) -DGGML_AVX2=$(has avx2)" \
    "-DGGML_F16C=$(has f16c) -DGGML_FMA=$(has fma) -DGGML_BMI2=$(has bmi2) -DGGML_AVX_VNNI=$(has avx_vnni)" \
    "-DGGML_AVX512=$avx512 -DGGML_AVX512_VBMI=$(has avx512vbmi) -DGGML_AVX512_VNNI=$(has avx512_vnni)" \
    "-DGGML_AVX512_BF16=$(has avx512_bf16) -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
}

if [[ "$CUDA_MODE" == "1" ]]; then
  # Only Hopper code (sm_90a); no -march=native (the device's CPU differs); no OpenMP runtime to
  # carry; libstdc++/libgcc static so the Debian-built binary runs on the device's Ubuntu.
  VARIANT_ARGS=(-DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_OPENMP=OFF
    "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc" -DLLAMA_BUILD_APP=OFF)
else
  VARIANT_ARGS=($(cpu_flags) -DGGML_CUDA=OFF)
fi

EXTRAS=ON  # examples and server: the CPU variant only
[[ "$CUDA_MODE" == "1" ]] && EXTRAS=OFF
CMAKE_ARGS=(
  -DCMAKE_BUILD_TYPE=Release
  "${VARIANT_ARGS[@]}"
  -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENCL=OFF
  -DLLAMA_CURL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=$EXTRAS
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=$EXTRAS
  -DBUILD_SHARED_LIBS=OFF
)

built() {
  local t
  for t in "${TARGETS[@]}"; do
    [[ -x "$BIN/$t" ]] || return 1
  done
  # The stamp holds the cmake arguments: a changed configuration means rebuild.
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "${CMAKE_ARGS[*]}" ]]
}

fetch_source() {
  if [[ -f "$SRC/CMakeLists.txt" ]]; then
    return 0
  fi
  mkdir -p "$ROOT/dl"
  local spec="llama-cpp-python"
  if [[ -n "${LLAMACPP_PY_VERSION:-}" ]]; then
    spec="llama-cpp-python==${LLAMACPP_PY_VERSION}"
  fi
  log "downloading sdist of $spec"
  python3 -m pip download --no-binary :all: --no-deps -d "$ROOT/dl" "$spec" >&2
  local tarball
  tarball="$(ls -t "$ROOT"/dl/llama_cpp_python-*.tar.gz "$ROOT"/dl/llama-cpp-python-*.tar.gz 2>/dev/null | head -1 || true)"
  if [[ -z "$tarball" ]]; then
    log "error: no sdist tarball found in $ROOT/dl"
    exit 1
  fi
  log "extracting vendor/llama.cpp from $(basename "$tarball")"
  local tmp="$ROOT/extract"
  rm -rf "$tmp" && mkdir -p "$tmp"
  tar -xzf "$tarball" -C "$tmp"
  local vendor
  vendor="$(find "$tmp" -maxdepth 3 -type d -path '*/vendor/llama.cpp' | head -1)"
  if [[ -z "$vendor" || ! -f "$vendor/CMakeLists.txt" ]]; then
    log "error: vendor/llama.cpp not found in $tarball"
    exit 1
  fi
  rm -rf "$SRC"
  mv "$vendor" "$SRC"
  basename "$tarball" > "$ROOT/SOURCE"
  rm -rf "$tmp"
}

build() {
  if built; then
    log "already built: $BIN"
    return 0
  fi
  fetch_source
  local gen=()
  if command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
  log "configuring in $BUILD"
  log "cmake args: ${CMAKE_ARGS[*]}"
  cmake -S "$SRC" -B "$BUILD" "${gen[@]}" "${CMAKE_ARGS[@]}" >&2
  log "building ${TARGETS[*]} with -j$JOBS"
  cmake --build "$BUILD" --config Release -j "$JOBS" --target "${TARGETS[@]}" >&2
  echo "${CMAKE_ARGS[*]}" > "$STAMP"
  log "done: $BIN"
}

cmd="${1:-build}"
case "$cmd" in
  build)
    build
    ;;
  path)
    echo "$BIN"
    ;;
  pack)
    [[ $# -ge 2 ]] || { echo "usage: $0 pack TARBALL" >&2; exit 2; }
    fetch_source
    tar czf "$2" -C "$ROOT" --anchored --exclude=src/models --exclude=src/docs --exclude=src/tests --exclude=src/benches \
      --exclude=src/examples --exclude=src/pocs --exclude=src/tools/ui --exclude=src/tools/server \
      --exclude=src/.github --exclude='src/ggml/src/ggml-sycl' --exclude='src/ggml/src/ggml-vulkan' \
      --exclude='src/ggml/src/ggml-opencl' --exclude='src/ggml/src/ggml-hexagon' src
    cp "$ROOT/SOURCE" "$2.SOURCE" 2>/dev/null || true
    ls -la "$2" >&2
    ;;
  bench)
    if [[ $# -lt 3 ]]; then
      echo "usage: $0 bench MODEL THREADS" >&2
      exit 2
    fi
    build
    "$BIN/llama-bench" -m "$2" -t "$3" -p 128 -n 128 -r 5 -o json
    ;;
  *)
    echo "usage: $0 {build|bench MODEL THREADS|path|pack TARBALL}" >&2
    exit 2
    ;;
esac
