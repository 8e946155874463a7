#!/usr/bin/env bash
# The full JSON-Schema-Test-Suite sweep of response_format json_schema (tests/clients/schema_sweep.py
# says what is judged and how): every group's schema in shared/testdata/json_schema plus vLLM's
# realistic benchmark schema, 20 samples each, validated with Python jsonschema; prints a summary
# table (schemas accepted, refused by keyword, samples valid / cut by length / invalid).
#   scripts/structured_output_sweep.sh                 starts `kvasir serve` (KVASIR_BIN or
#                                                      build/tools/kvasir) on the default model
#                                                      through pytest (-m sweep)
#   scripts/structured_output_sweep.sh URL [MODEL]     sweeps a server already running at URL
#                                                      (any device; MODEL default smol), 4 cases
#                                                      in flight (KVASIR_SWEEP_JOBS)
# The table also goes to $KVASIR_SWEEP_REPORT (default build/json_schema_sweep.md). About 213
# requests of n=20: minutes on a GPU, tens of minutes on 2 CPU cores. Exit 1 when a case fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
shared="${KVASIR_SHARED_TESTDATA:-$(cd "$root/.." && pwd)/shared/testdata}"
export KVASIR_SHARED_TESTDATA="$shared"
export KVASIR_CHAT_TEMPLATES="${KVASIR_CHAT_TEMPLATES:-$shared/chat_templates}"
report="${KVASIR_SWEEP_REPORT:-$root/build/json_schema_sweep.md}"
mkdir -p "$(dirname "$report")"
if [ $# -ge 1 ]; then
  exec python3 tests/clients/schema_sweep.py --base-url "$1" --model "${2:-smol}" \
    --jobs "${KVASIR_SWEEP_JOBS:-4}" --report "$report"
fi
export KVASIR_BIN="${KVASIR_BIN:-$root/build/tools/kvasir}"
KVASIR_SCHEMA_SWEEP=1 KVASIR_SWEEP_REPORT="$report" \
  exec python3 -m pytest -q -p no:cacheprovider tests/clients/test_json_schema_suite.py -m sweep
