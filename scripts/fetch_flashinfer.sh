#!/usr/bin/env bash
# Fetches FlashInfer 0.7.4 (Apache-2.0; its Hopper paged prefill attention sits behind our prefill
# op, src/backend/cuda/attention_prefill_flashinfer.cu) from its pinned PyPI wheel, checks its
# sha256 and unpacks only the header trees that kernel needs, outside the repository so that
# nothing of it is committed and a fresh clone reuses the cache:
#   $KVASIR_FLASHINFER_DIR (default ~/.cache/kvasir/flashinfer-0.7.4)/include   flashinfer/ headers
#   $KVASIR_FLASHINFER_DIR/cutlass/{include,tools/util/include}                CUTLASS / CuTe
#   $KVASIR_FLASHINFER_DIR/cccl/{cub,libcudacxx,thrust}                        CCCL as FlashInfer pins it
# The wheel itself is kept in ~/.cache/kvasir/wheels (KVASIR_WHEEL_CACHE) and downloaded with
# `pip download --no-deps` (the ordinary client) only when it is missing or its sha256 is wrong.
# Idempotent: a matching stamp returns at once. Concurrent runs serialize on a lock file.
# cmake/flashinfer.cmake runs it at configure time of a CUDA build; scripts/cuda_device_run.sh
# --build runs it before configuring.
set -euo pipefail

version=0.7.4
wheel_name="flashinfer_python-${version}-py3-none-any.whl"
sha=a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32
dir="${KVASIR_FLASHINFER_DIR:-$HOME/.cache/kvasir/flashinfer-$version}"
wheels="${KVASIR_WHEEL_CACHE:-$HOME/.cache/kvasir/wheels}"
wheel="$wheels/$wheel_name"
# What is unpacked: wheel paths under flashinfer/data/, and the stamp that says it is complete.
trees=(include cutlass/include cutlass/tools/util/include cccl/cub cccl/libcudacxx cccl/thrust)
stamp="$sha ${trees[*]}"

mkdir -p "$dir" "$wheels"
exec 9>"$dir/.lock"
flock 9

[ "$(cat "$dir/.kvasir-unpacked" 2>/dev/null)" = "$stamp" ] && exit 0

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
if [ ! -f "$wheel" ] || [ "$(sha_of "$wheel")" != "$sha" ]; then
  echo "fetch_flashinfer: downloading flashinfer-python $version (wheel, no dependencies)" >&2
  tmp=$(mktemp -d "$wheels/.dl.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "flashinfer-python==$version" ||
    { echo "fetch_flashinfer: pip download failed (no network? put $wheel_name in $wheels)" >&2; exit 1; }
  got=$(sha_of "$tmp/$wheel_name")
  [ "$got" = "$sha" ] || { echo "fetch_flashinfer: sha256 mismatch for $wheel_name: $got" >&2; exit 1; }
  mv "$tmp/$wheel_name" "$wheel"
fi

# Unpack into a fresh folder beside the cache, then swap it in: a half-unpacked tree is never used.
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
patterns=()
for t in "${trees[@]}"; do patterns+=("flashinfer/data/$t/*"); done
python3 - "$wheel" "$dir.tmp" "${patterns[@]}" <<'PY'
import fnmatch, os, sys, zipfile
wheel, dest, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
prefix = "flashinfer/data/"
with zipfile.ZipFile(wheel) as z:
    n = 0
    for name in z.namelist():
        if name.endswith("/") or not any(fnmatch.fnmatch(name, p) for p in patterns):
            continue
        out = os.path.join(dest, name[len(prefix):])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(name) as src, open(out, "wb") as dst:
            dst.write(src.read())
        n += 1
    if n == 0:
        sys.exit("fetch_flashinfer: no headers found in the wheel")
PY
for t in include cutlass cccl; do
  rm -rf "${dir:?}/$t"
  mv "$dir.tmp/$t" "$dir/$t"
done
rm -rf "$dir.tmp"
echo "$stamp" >"$dir/.kvasir-unpacked"
echo "fetch_flashinfer: headers in $dir" >&2
