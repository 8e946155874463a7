#!/usr/bin/env bash
# Configures and builds Kvasir into build/ (or $KVASIR_BUILD_DIR) with Ninja and ccache.
# Extra CMake arguments pass through, e.g. scripts/build.sh -DKVASIR_SANITIZE=ON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${KVASIR_BUILD_DIR:-$root/build}"
jobs="${KVASIR_JOBS:-2}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${KVASIR_BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
ninja -C "$build" -j"$jobs"
