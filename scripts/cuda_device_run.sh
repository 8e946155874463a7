#!/usr/bin/env bash
# The one script that runs on the GPU machine (device tool): takes the binaries carried in
# .carry/bin.tgz (built here with scripts/cuda_device_run.sh --build), else builds them there; then op
# tests (+ compute-sanitizer memcheck), the end-to-end check and the benchmarks; logs to $OUT and
# a summary table last. Stages: KVASIR_STAGES="tests memcheck e2e latency throughput peer"
# (default: all but peer). KVASIR_TP_PROMPTS sets the throughput run's prompt count (1000).
# Backend knobs for A/B runs (environment): KVASIR_CUDA_PDL=0, KVASIR_CUDA_FUSE=0,
# KVASIR_CUDA_FUSE_NORM=1, KVASIR_CUDA_ATTN=2, KVASIR_CUDA_PROFILE=1 (per-op device time).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [[ "${1:-}" == "--build" ]]; then
  # Here, on the build machine: a binary the GPU machine can run (sm_90a + PTX, static libstdc++).
  build=${KVASIR_BUILD_DIR:-$root/build-cuda}
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVASIR_CUDA=ON \
        -DKVASIR_STATIC_RUNTIME=ON >/dev/null
  ninja -C "$build" -j"${KVASIR_JOBS:-2}" kvasir cuda_ops_test cuda_e2e_test
  mkdir -p "$root/.carry/bin" "$root/.carry/lib"
  for b in kvasir src/backend/cuda/cuda_ops_test src/backend/cuda/cuda_e2e_test; do
    cp "$build/tools/$b" "$root/.carry/bin/" 2>/dev/null || cp "$build/$b" "$root/.carry/bin/"
  done
  strip "$root/.carry/bin/"* 2>/dev/null || true
  # Compressed: the uncompressed binaries (fat binaries with sm_90a code) alone approach the 64 MiB
  # the device call carries.
  tar czf "$root/.carry/bin.tgz" -C "$root/.carry" bin && rm -rf "$root/.carry/bin"
  # Debian libraries the GPU machine's Ubuntu may lack.
  for l in libpcre2-8.so.0 libutf8proc.so.2; do
    cp -L "/usr/lib/x86_64-linux-gnu/$l" "$root/.carry/lib/" 2>/dev/null || true
  done
  [[ -f "$root/../shared/peers/hf_llama8b.py" ]] && cp "$root/../shared/peers/hf_llama8b.py" "$root/.carry/"
  du -sh "$root/.carry"
  exit 0
fi

OUT=${OUT:-$root/out}
mkdir -p "$OUT"
stages=${KVASIR_STAGES:-"tests memcheck e2e latency throughput"}
bin=$root/.carry/bin
export LD_LIBRARY_PATH="$root/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="/usr/local/cuda/bin:/opt/torch/.venv/bin:$PATH"
summary=()
note() { summary+=("$1"); echo "== $1"; }
has() { [[ " $stages " == *" $1 "* ]]; }

[[ -f "$root/.carry/bin.tgz" && ! -x "$bin/kvasir" ]] && tar xzf "$root/.carry/bin.tgz" -C "$root/.carry"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"

if [[ ! -x "$bin/kvasir" ]]; then
  echo "no carried binaries: building on the device"
  cmake -S "$root" -B /tmp/kb -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVASIR_CUDA=ON >"$OUT/build.log" 2>&1 &&
    ninja -C /tmp/kb -j16 kvasir cuda_ops_test cuda_e2e_test >>"$OUT/build.log" 2>&1 || { note "build FAILED"; tail -30 "$OUT/build.log"; }
  mkdir -p "$bin"
  cp /tmp/kb/tools/kvasir /tmp/kb/src/backend/cuda/cuda_ops_test /tmp/kb/src/backend/cuda/cuda_e2e_test "$bin/" 2>/dev/null
fi

if has tests; then
  timeout 240 "$bin/cuda_ops_test" >"$OUT/ops_test.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|rel|Expected" "$OUT/ops_test.log" | head -40
  note "op tests: rc=$rc $(grep -E '^\[  PASSED' "$OUT/ops_test.log" | head -1) $(grep -c '^\[  FAILED  \]' "$OUT/ops_test.log") failed"
fi
if has memcheck; then
  if command -v compute-sanitizer >/dev/null; then
    timeout "${KVASIR_MEMCHECK_TIMEOUT:-120}" compute-sanitizer --tool memcheck --leak-check no \
      "$bin/cuda_ops_test" --gtest_filter='CudaOps.*:CudaAttention.Decode*:CudaAttention.Chunked*:CudaAttention.Prefill' \
      >"$OUT/memcheck.log" 2>&1
    rc=$?
    tail -5 "$OUT/memcheck.log"
    note "memcheck: rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  else
    note "memcheck: compute-sanitizer not found"
  fi
fi
if has e2e; then
  timeout 180 "$bin/cuda_e2e_test" >"$OUT/e2e_test.log" 2>&1
  rc=$?
  grep -E "agreement|device steps|^\[  (PASSED|FAILED) |Failure" "$OUT/e2e_test.log" | head -20
  note "e2e: rc=$rc $(grep -E '^\[  PASSED' "$OUT/e2e_test.log" | head -1)"
fi
model=configs/llama-3.1-8b.json
lat() {  # name, extra args
  local name=$1; shift
  timeout 150 "$bin/kvasir" bench latency --model $model --load-format dummy --device cuda --input-len 128 \
    --output-len 128 --num-iters 3 "$@" >"$OUT/lat_$name.log" 2>&1
  local rc=$?
  tail -4 "$OUT/lat_$name.log"
  note "latency $name: rc=$rc $(grep -E '^decode' "$OUT/lat_$name.log")"
}
if has latency; then
  lat b1 --batch-size 1
  KVASIR_CUDA_FUSE=0 lat b1_nofuse --batch-size 1
  lat b1_eager --batch-size 1 --enforce-eager
  lat b64 --batch-size 64
fi
if has profile; then
  # Per-op device time (every step eager, events around each op): decode at batch 1, and
  # long-context batch 256 (prefill in chunks, then decode) as the throughput run sees it.
  KVASIR_CUDA_PROFILE=1 lat b1_profile --batch-size 1
  grep -A1 "device steps" "$OUT/lat_b1_profile.log" | tail -1
  KVASIR_CUDA_PROFILE=1 timeout 150 "$bin/kvasir" bench latency --model $model --load-format dummy --device cuda \
    --batch-size 256 --input-len 1024 --output-len 8 --num-iters 1 --num-iters-warmup 0 \
    --max-num-batched-tokens 8192 >"$OUT/lat_b256_profile.log" 2>&1
  tail -4 "$OUT/lat_b256_profile.log"
  note "b256 x 1024 profile: rc=$? $(grep -E '^(prefill|decode)' "$OUT/lat_b256_profile.log" | tr '\n' ' ')"
fi
if has throughput; then
  n=${KVASIR_TP_PROMPTS:-1000}
  timeout "${KVASIR_TP_TIMEOUT:-300}" "$bin/kvasir" bench throughput --model $model --load-format dummy --device cuda \
    --num-prompts "$n" --input-len 1000 --output-len 1000 --gpu-memory-utilization 0.9 >"$OUT/throughput.log" 2>&1
  rc=$?
  tail -6 "$OUT/throughput.log"
  note "throughput ($n x 1000/1000): rc=$rc $(grep -E '^Throughput' "$OUT/throughput.log")"
  note "$(grep -E 'device steps' "$OUT/throughput.log" | head -1)"
fi
if has peer && [[ -f .carry/hf_llama8b.py ]]; then
  PYTHONUNBUFFERED=1 timeout 240 python3 .carry/hf_llama8b.py >"$OUT/peer.log" 2>&1
  tail -8 "$OUT/peer.log"
  note "peer (HF transformers): $(tail -3 "$OUT/peer.log" | tr '\n' ' ')"
fi

echo
echo "================ summary ================"
for s in "${summary[@]}"; do echo "$s"; done
