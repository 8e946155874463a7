#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this): installs what is missing,
# fetches the models, converts them to HF directories, builds (CPU only, ccache), runs every C++
# test through ctest and the server suite through pytest, then the sanitizer/fuzz stage.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export KVASIR_JOBS="${KVASIR_JOBS:-2}"
# Third-party test data sits beside the checkout (shared/, see its MANIFEST.md).
shared="${KVASIR_SHARED_TESTDATA:-$(cd "$root/.." && pwd)/shared/testdata}"
export KVASIR_CHAT_TEMPLATES="${KVASIR_CHAT_TEMPLATES:-$shared/chat_templates}"
export KVASIR_SHARED_TESTDATA="$shared"

bash scripts/setup.sh
# Light converter deps (no torch): the HF-directory tests load the same weights as the GGUF ones.
python3 -c "import gguf, safetensors, transformers, tokenizers" 2>/dev/null ||
  python3 -m pip install -q numpy gguf safetensors transformers tokenizers sentencepiece protobuf
for pair in "SmolLM2-135M-Instruct.Q4_1.gguf smollm2-hf" "gemma-3-270m-q4_k_m.gguf gemma3-hf"; do
  set -- $pair
  [ -f "models/$2/model.safetensors" ] || python3 scripts/convert_gguf_to_hf.py "models/$1" "models/$2"
done
# FP8 checkpoints of SmolLM2 for quant_golden_test (numpy only; skipped when already made).
python3 scripts/make_quantized_checkpoints.py
# GPTQ / AWQ / compressed-tensors pack-quantized SmolLM2 (numpy only; cached, rewritten when stale).
python3 scripts/make_int_quantized_checkpoints.py

KVASIR_BUILD_DIR="$root/build" bash scripts/build.sh -DKVASIR_CUDA=OFF
ctest --test-dir build --output-on-failure -j1 --timeout 1800 -LE model-full

if [ -d tests/server ]; then
  KVASIR_BIN="$root/build/tools/kvasir" python3 -m pytest -q tests/server
  # The same server behind two data-parallel engine replicas (every Server the files start gets
  # --data-parallel-size 2, tests/server/conftest.py): routes, streaming, n > 1, tools and
  # responses, speculation, 1,000 concurrent streams, disconnects, faults and shutdown; ~2.5 min on
  # 2 cores. The whole suite that way: KVASIR_TEST_DATA_PARALLEL=2 pytest tests/server (~6 min).
  KVASIR_TEST_DATA_PARALLEL=2 KVASIR_BIN="$root/build/tools/kvasir" python3 -m pytest -q \
    tests/server/test_api.py tests/server/test_concurrency.py tests/server/test_faults.py \
    tests/server/test_shutdown.py tests/server/test_responses.py tests/server/test_speculative.py \
    tests/server/test_tool_calls.py
  # Two replicas on two nodes (network namespaces, root; tests/server/dp_nodes.py): node 0's
  # replica in the server, node 1's a --headless process over the link; ~1 min on 2 cores.
  if [ "$(id -u)" = 0 ]; then
    KVASIR_TEST_DATA_PARALLEL_NODES=1 KVASIR_BIN="$root/build/tools/kvasir" timeout -k 30 900 python3 -m pytest -q \
      tests/server/test_api.py tests/server/test_concurrency.py tests/server/test_shutdown.py
  else
    echo "SKIPPED: the server suite with data-parallel replicas on two nodes needs root (ip netns add)" >&2
  fi
fi
# Real clients unchanged (openai, langchain-openai, instructor, openai-agents) against `kvasir
# serve`: structured outputs, tool calling, the Responses API, prompt scoring, and the
# structured-output acceptance (JSON-Schema-Test-Suite subset, regex, choice, every GBNF grammar).
# The full schema sweep is scripts/structured_output_sweep.sh (not run here).
# Each request is bounded (180 s), and the whole stage too.
if [ -d tests/clients ]; then
  KVASIR_BIN="$root/build/tools/kvasir" timeout -k 30 2400 python3 -m pytest -q tests/clients
fi

# Sanitizer stage (scripts/sanitize.sh): an ASan+UBSan build running the unit tests, the engine
# end to end on the real model and a bounded server-suite subset; a ThreadSanitizer build running
# the concurrency tests and the engine's threads on the real model; every fuzz target's
# regression and seed inputs replayed, then a deterministic fuzz run (fixed seed, fixed run count,
# scripts/fuzz --ci) so the same commit always gives the same result. KVASIR_SKIP_SANITIZERS=1 skips it (local
# quick runs only).
if [ -z "${KVASIR_SKIP_SANITIZERS:-}" ]; then
  bash scripts/sanitize.sh
fi
