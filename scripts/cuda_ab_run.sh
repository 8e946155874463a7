#!/usr/bin/env bash
# A/B of two builds on the GPU machine (device tool), in one sitting: the binaries carried in
# .carry/bin.txz ("new", scripts/cuda_device_run.sh --build) against those in .carry/base-bin.txz
# ("base", the same --build run on an older checkout, renamed; .tgz files are taken too). Benchmarks alternate between the two so
# drift of the machine lands on both. Logs go to $OUT, a summary table is printed last.
# Stages (KVASIR_AB_STAGES): "latency" = bench latency 128/128 at batch 1 and 64, KVASIR_AB_ROUNDS
# rounds (default 3) of base then new; "throughput" = bench throughput 1000 x 1000/1000 (ignore
# eos) for each entry of KVASIR_AB_TP ("name:build:extra flags", default base, new, new with
# --async-scheduling), reporting output tok/s and the backend's idle time between device steps.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$root/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
stages=${KVASIR_AB_STAGES:-"latency throughput"}
rounds=${KVASIR_AB_ROUNDS:-3}
model=configs/llama-3.1-8b.json
summary=()
note() { summary+=("$1"); echo "== $1"; }
has() { [[ " $stages " == *" $1 "* ]]; }

for b in new:bin base:base-bin; do
  name=${b%%:*} f=.carry/${b#*:}.txz
  [[ -f $f ]] || f=.carry/${b#*:}.tgz  # tar detects the compression
  mkdir -p "/tmp/ab/$name" && tar xf "$f" -C "/tmp/ab/$name" || { note "no $f"; exit 1; }
done
binof() { echo "/tmp/ab/$1/bin/kvasir"; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"

if has latency; then
  for r in $(seq 1 "$rounds"); do
    for build in base new; do
      for bs in 1 64; do
        log="$OUT/lat_${build}_b${bs}_r$r.log"
        timeout 150 "$(binof $build)" bench latency --model $model --load-format dummy --device cuda \
          --input-len 128 --output-len 128 --num-iters 3 --batch-size $bs >"$log" 2>&1
        note "latency $build b$bs round $r: rc=$? $(grep -E '^decode' "$log")"
      done
    done
  done
fi
if has throughput; then
  for spec in ${KVASIR_AB_TP:-base:base: new:new: new_async:new:--async-scheduling}; do
    IFS=: read -r name build extra <<<"$spec"
    log="$OUT/tp_$name.log"
    timeout "${KVASIR_AB_TP_TIMEOUT:-200}" "$(binof "$build")" bench throughput --model $model --load-format dummy \
      --device cuda --num-prompts "${KVASIR_AB_TP_PROMPTS:-1000}" --input-len 1000 --output-len 1000 \
      --gpu-memory-utilization 0.9 $extra >"$log" 2>&1
    note "throughput $name: rc=$? $(grep -E '^Throughput' "$log")"
    note "  $(grep -E 'device steps' "$log" | head -1)"
  done
fi
echo
echo "================ summary ================"
for s in "${summary[@]}"; do echo "$s"; done
tar czf /tmp/ab_logs.tgz -C "$OUT" . 2>/dev/null && rm -f "$OUT"/* && mv /tmp/ab_logs.tgz "$OUT/ab_logs.tgz"
