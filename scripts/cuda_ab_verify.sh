#!/usr/bin/env bash
# Issue 16's batch-1 verify step on the device, A/B of the knobs that set how a k-token verify
# runs: KVASIR_CUDA_EXACT_BUCKETS (2: a 5-row verify pads to an 8-row graph; 8: runs 5 rows) and
# KVASIR_GEMV_TC_MIN_ROWS (9: every GEMV on CUDA cores; 2: 2-8 tokens on tensor cores; 1: also 1)
# and KVASIR_GEMV_TC_VARIANT (0|1, the tensor-core kernel's build); KVASIR_AB_CONFIGS lists
# name:buckets:tc_min_rows:variant entries, KVASIR_AB_BATCHES the batch sizes (1 16).
# Plain decode steps and forced k = 4 verify steps (bench latency --num-speculative-tokens-forced),
# interleaved, KVASIR_AB_ROUNDS rounds (2), at batch 1 and 16; medians per configuration.
#   scripts/cuda_ab_verify.sh BIN_DIR OUT_DIR
set -uo pipefail
bin=$1
out=$2
model=configs/llama-3.1-8b.json
configs=${KVASIR_AB_CONFIGS:-"cc:8:9:0 tc:8:2:0 tcv1:8:2:1 tc1:8:1:0 tc1v1:8:1:1"}
batches=${KVASIR_AB_BATCHES:-"1 16"}
declare -A ms=()
for round in $(seq 1 "${KVASIR_AB_ROUNDS:-2}"); do
  for cfg in $configs; do
    IFS=: read -r name eb tc var <<<"$cfg"
    for b in $batches; do
      for k in 0 4; do
        log="$out/ab_${name}_b${b}_k${k}_$round.log"
        KVASIR_CUDA_EXACT_BUCKETS=$eb KVASIR_GEMV_TC_MIN_ROWS=$tc KVASIR_GEMV_TC_VARIANT=${var:-0} timeout 150 "$bin/kvasir" bench latency --model $model \
          --load-format dummy --device cuda --input-len 128 --output-len 128 --num-iters 3 --batch-size $b \
          --num-speculative-tokens-forced $k >"$log" 2>&1
        v=$(grep -oE '\(([0-9.]+) ms per step\)' "$log" | grep -oE '[0-9.]+')
        ms[${name}_b${b}_k$k]+="${v:-FAIL} "
      done
    done
  done
done
med() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); else print 0}'; }
for cfg in $configs; do
  name=${cfg%%:*}
  for b in $batches; do
    [[ -z ${ms[${name}_b${b}_k0]:-} ]] && continue
    p=$(echo "${ms[${name}_b${b}_k0]}" | med); f=$(echo "${ms[${name}_b${b}_k4]}" | med)
    echo "AB $cfg batch $b: plain ms/step ${ms[${name}_b${b}_k0]}| k=4 verify ${ms[${name}_b${b}_k4]}| medians $p / $f = $(awk -v a="$f" -v b="$p" 'BEGIN {if (b > 0) printf "%.3f", a / b}')"
  done
done
