#!/usr/bin/env bash
# Sets up, builds and starts Kvasir on the default model (SmolLM2-135M-Instruct, Q4_1).
# Extra arguments go to the command, e.g. scripts/run.sh --port 9000.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
KVASIR_BUILD_DIR="$root/build" bash "$root/scripts/build.sh" -DKVASIR_CUDA=OFF
cd "$root"
if "$root/build/tools/kvasir" serve --help >/dev/null 2>&1; then
  exec "$root/build/tools/kvasir" serve "$@"
fi
exec "$root/build/tools/kvasir" generate --prompt "${KVASIR_PROMPT:-Explain paged attention in one paragraph.}" "$@"
