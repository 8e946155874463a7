#!/usr/bin/env bash
# Structured-output load against the same load unconstrained, side by side in one sitting: starts
# `kvasir serve` with the given flags, then runs `kvasir bench serve` rounds alternating free and
# schema-constrained, and prints each round's output tokens/s and the ratio of the medians.
# Finished schema outputs must parse as JSON. The default schema (tests/data/structured/
# bench_long_schema.json: at least 64 records of strings, integers, booleans, arrays and enums)
# cannot be complete before max_tokens, so both runs generate the same number of tokens and the
# ratio measures the cost of the masks, not shorter answers (vLLM's benchmark schema is an array
# that random weights close at once: "[]").
#   scripts/bench_structured.sh OUT_DIR [serve flags...]
# Environment: KVASIR_BIN (build/tools/kvasir), SO_PORT (18300), SO_ROUNDS (3), SO_PROMPTS (256),
# SO_CONCURRENCY (64), SO_INPUT_LEN (256), SO_OUTPUT_LEN (512), SO_ENDPOINT (/v1/completions),
# SO_SCHEMA (the long schema above), SO_TOKENIZER (for exact random prompts).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: bench_structured.sh OUT_DIR [serve flags...]}
shift
mkdir -p "$out"
bin=${KVASIR_BIN:-$root/build/tools/kvasir}
port=${SO_PORT:-18300}
shared=${KVASIR_SHARED_TESTDATA:-$root/../shared/testdata}
schema=${SO_SCHEMA:-$root/tests/data/structured/bench_long_schema.json}
out_len=${SO_OUTPUT_LEN:-512}
"$bin" serve --port "$port" "$@" >"$out/serve.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null; wait $spid 2>/dev/null' EXIT
for _ in $(seq 1 300); do curl -sf "localhost:$port/health" >/dev/null 2>&1 && break; sleep 1; done
curl -sf "localhost:$port/health" >/dev/null || { echo "server did not start"; tail -5 "$out/serve.log"; exit 1; }
extra=$(python3 -c "import json,sys; print(json.dumps({'response_format': {'type': 'json_schema', 'json_schema': {'name': 'rpg', 'schema': json.load(open(sys.argv[1]))}}}))" "$schema")
tok=(); [[ -n ${SO_TOKENIZER:-} ]] && tok=(--tokenizer "$SO_TOKENIZER")
for r in $(seq 1 "${SO_ROUNDS:-3}"); do
  for mode in free schema; do
    # Free runs ignore EOS so both runs generate max_tokens per request (the schema cannot end
    # sooner): output tokens/s then compares the same work, not shorter answers.
    args=(--ignore-eos); [[ $mode == schema ]] && args=(--extra-body "$extra")
    "$bin" bench serve --port "$port" --endpoint "${SO_ENDPOINT:-/v1/completions}" --num-prompts "${SO_PROMPTS:-256}" \
      --max-concurrency "${SO_CONCURRENCY:-64}" --random-input-len "${SO_INPUT_LEN:-256}" --random-output-len "$out_len" \
      --temperature 1 --seed "$r" "${tok[@]}" --output-json "$out/${mode}_$r.json" --save-detailed "${args[@]}" \
      >"$out/${mode}_$r.log" 2>&1
    echo "round $r $mode: rc=$? $(grep -E '^Output token throughput' "$out/${mode}_$r.log")"
  done
done
python3 - "$out" "$out_len" <<'PY'
import glob, json, statistics, sys
out, out_len = sys.argv[1], int(sys.argv[2])
tput = {m: [json.load(open(f))["output_throughput"] for f in sorted(glob.glob(f"{out}/{m}_*.json"))] for m in ("free", "schema")}
ok = bad = cut = 0
for f in glob.glob(f"{out}/schema_*.json"):
    d = json.load(open(f))
    for t, n in zip(d.get("generated_texts", []), d.get("output_lens", [])):
        if n >= out_len:
            cut += 1
            continue
        try:
            json.loads(t)
            ok += 1
        except ValueError:
            bad += 1
mf, ms = statistics.median(tput["free"]), statistics.median(tput["schema"])
print(f"output tok/s medians: free {mf:.1f}, schema {ms:.1f}, ratio {ms / mf:.3f}")
print(f"schema outputs: {ok} valid JSON, {bad} invalid, {cut} cut by max_tokens")
PY
