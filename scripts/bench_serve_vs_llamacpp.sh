#!/usr/bin/env bash
# Serving benchmark, kvasir serve vs llama.cpp's llama-server: the same GGUF, the same thread
# count, the same `kvasir bench serve` workload (random prompts, ignore_eos so both servers
# generate exactly the same number of tokens), one server at a time on a free loopback port.
# Prints each summary, then a side-by-side table with ratios (kvasir / llama-server).
#
# Usage: scripts/bench_serve_vs_llamacpp.sh
# Env (defaults):
#   KVASIR_BIN     build/tools/kvasir          LLAMA_SERVER  ~/.cache/kvasir/llama.cpp/build/bin/llama-server
#                                                            (scripts/llamacpp.sh build makes it)
#   MODEL          models/SmolLM2-135M-Instruct.Q4_1.gguf
#   THREADS        nproc                       CONCURRENCY   16 (llama-server gets -np CONCURRENCY)
#   NUM_PROMPTS    128                         INPUT_LEN     192, RANGE_RATIO 0.33 (inputs 128..256)
#   OUTPUT_LEN     128 (same range ratio: vLLM's random dataset draws both lengths)
#   SLOT_CTX       512 tokens per llama-server slot (-c = SLOT_CTX * CONCURRENCY)
#   OUT_DIR        /tmp/bench_serve_vs_llamacpp (JSON results and server logs)
#   ONLY           kvasir | llamacpp to run one side
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVASIR_BIN="${KVASIR_BIN:-$REPO/build/tools/kvasir}"
LLAMA_SERVER="${LLAMA_SERVER:-$HOME/.cache/kvasir/llama.cpp/build/bin/llama-server}"
MODEL="${MODEL:-$REPO/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${THREADS:-$(nproc)}"
CONCURRENCY="${CONCURRENCY:-16}"
NUM_PROMPTS="${NUM_PROMPTS:-128}"
INPUT_LEN="${INPUT_LEN:-192}"
RANGE_RATIO="${RANGE_RATIO:-0.33}"
OUTPUT_LEN="${OUTPUT_LEN:-128}"
SLOT_CTX="${SLOT_CTX:-512}"
OUT_DIR="${OUT_DIR:-/tmp/bench_serve_vs_llamacpp}"
ONLY="${ONLY:-}"
mkdir -p "$OUT_DIR"

log() { echo "[bench_serve_vs_llamacpp] $*" >&2; }
for f in "$KVASIR_BIN" "$MODEL"; do [[ -e "$f" ]] || { log "missing $f"; exit 1; }; done
[[ -n "$ONLY" && "$ONLY" != llamacpp ]] || [[ -x "$LLAMA_SERVER" ]] || { log "missing $LLAMA_SERVER (scripts/llamacpp.sh build)"; exit 1; }

# A loopback port nobody listens on (connect refused), picked at random.
free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 30000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  log "no free port"; exit 1
}

SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    for _ in $(seq 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT
trap 'exit 130' INT TERM

wait_healthy() {  # port log
  for _ in $(seq 600); do
    kill -0 "$SERVER_PID" 2>/dev/null || { log "server died:"; tail -20 "$2" >&2; exit 1; }
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return
    sleep 0.5
  done
  log "server on port $1 never became healthy"; exit 1
}

# The one workload both servers see.
bench() {  # name port
  local load_before
  load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
  "$KVASIR_BIN" bench serve --base-url "http://127.0.0.1:$2" --model smol --endpoint /v1/completions \
    --dataset-name random --random-input-len "$INPUT_LEN" --random-output-len "$OUTPUT_LEN" \
    --random-range-ratio "$RANGE_RATIO" --tokenizer "$MODEL" --num-prompts "$NUM_PROMPTS" \
    --max-concurrency "$CONCURRENCY" --ignore-eos --temperature 0 --seed 0 --label "$1" \
    --output-json "$OUT_DIR/$1.json" | tee "$OUT_DIR/$1.txt"
  echo "load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT_DIR/$1.txt"
}

if [[ -z "$ONLY" || "$ONLY" == kvasir ]]; then
  port="$(free_port)"
  log "kvasir serve on port $port, $THREADS threads"
  "$KVASIR_BIN" serve "$MODEL" --host 127.0.0.1 --port "$port" --served-model-name smol --threads "$THREADS" \
    --max-model-len $((SLOT_CTX * 4)) >"$OUT_DIR/kvasir_serve.log" 2>&1 &
  SERVER_PID=$!
  wait_healthy "$port" "$OUT_DIR/kvasir_serve.log"
  bench kvasir "$port"
  stop_server
fi

if [[ -z "$ONLY" || "$ONLY" == llamacpp ]]; then
  port="$(free_port)"
  log "llama-server on port $port, $THREADS threads, -np $CONCURRENCY, -c $((SLOT_CTX * CONCURRENCY))"
  "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" --alias smol -t "$THREADS" -tb "$THREADS" \
    -np "$CONCURRENCY" -c $((SLOT_CTX * CONCURRENCY)) >"$OUT_DIR/llama_server.log" 2>&1 &
  SERVER_PID=$!
  wait_healthy "$port" "$OUT_DIR/llama_server.log"
  bench llamacpp "$port"
  stop_server
fi

[[ -f "$OUT_DIR/kvasir.json" && -f "$OUT_DIR/llamacpp.json" ]] || exit 0
python3 - "$OUT_DIR/kvasir.json" "$OUT_DIR/llamacpp.json" <<'PY'
import json, sys
k, l = (json.load(open(p)) for p in sys.argv[1:3])
rows = [("completed / failed", None), ("total_input_tokens", "{:.0f}"), ("total_output_tokens", "{:.0f}"),
        ("duration", "{:.1f}"), ("request_throughput", "{:.3f}"), ("output_throughput", "{:.2f}"),
        ("total_token_throughput", "{:.2f}")]
rows += [(f"{s}_{m}_ms", "{:.1f}") for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p90", "p99")]
print(f"{'metric':<26}{'kvasir':>12}{'llama-server':>14}{'kvasir/llama':>14}")
for name, fmt in rows:
    if fmt is None:
        print(f"{name:<26}{k['completed']:>8} / {k['failed']:<2}{l['completed']:>10} / {l['failed']:<2}")
        continue
    a, b = k.get(name), l.get(name)
    ratio = f"{a / b:.2f}x" if a is not None and b else "-"
    print(f"{name:<26}{fmt.format(a):>12}{fmt.format(b):>14}{ratio:>14}")
PY
