#!/usr/bin/env python3
"""One CPU benchmark sitting: kvasir against llama.cpp on the same GGUF and thread count, runs
interleaved round by round so both see the same machine state; prints medians and ratios as a
Markdown table (for BENCHMARKS.md) and writes everything as JSON.

  scripts/bench_cpu.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf] [--rounds 3]
                       [--threads 1,2] [--kvasir build/tools/kvasir] [--output-json F]
                       [--tg-depth 128]

--tg-depth D also runs llama-bench's tg128 after D tokens of context (-d D), as kvasir's decode
runs after its 128-token prompt; the depth-0 tg128 stays the headline column as before. Every
round prints the load average and the CPU model, which go into the JSON too.

Measures (issue 2) batch-1 prefill 128 / decode 128 against `llama-bench -p 128 -n 128`, and
(issue 3) offline throughput of 64 requests x 128 in / 128 out against `llama-batched-bench
-npl 64 -npp 128 -ntg 128`. llama.cpp comes from scripts/llamacpp.sh (built outside the repo).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA_BIN = os.path.join(os.environ.get("KVASIR_LLAMACPP_DIR", os.path.expanduser("~/.cache/kvasir/llama.cpp")),
                         "build", "bin")


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout


def kvasir_json(args, cmd):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        run([args.kvasir, "bench"] + cmd + ["--model", args.model, "--output-json", f.name])
        return json.load(open(f.name))


def kvasir_latency(args, threads):
    j = kvasir_json(args, ["latency", "--input-len", "128", "--output-len", "128", "--num-iters", "3",
                           "--threads", str(threads)])
    return j["prefill_tokens_per_s"], j["decode_tokens_per_s"]


def llama_bench(args, threads):
    """(pp128, tg128) at depth 0, and tg128 at --tg-depth (None without it)."""
    depth = ["-d", f"0,{args.tg_depth}"] if args.tg_depth else []
    out = run([os.path.join(LLAMA_BIN, "llama-bench"), "-m", args.model, "-p", "128", "-n", "128", "-r", "3",
               "-t", str(threads), "-o", "json"] + depth)
    pp = tg = tg_deep = None
    for row in json.loads(out):
        d = row.get("n_depth", 0)
        if row["n_prompt"] > 0 and row["n_gen"] == 0 and d == 0:
            pp = row["avg_ts"]
        elif row["n_gen"] > 0 and row["n_prompt"] == 0:
            if d == 0:
                tg = row["avg_ts"]
            elif d == args.tg_depth:
                tg_deep = row["avg_ts"]
    return pp, tg, tg_deep


def cpu_model():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def kvasir_throughput(args, threads):
    j = kvasir_json(args, ["throughput", "--num-prompts", "64", "--input-len", "128", "--output-len", "128",
                           "--max-num-seqs", "64", "--threads", str(threads)])
    return j["output_tokens_per_second"], j["tokens_per_second"]


def llama_batched(args, threads):
    out = run([os.path.join(LLAMA_BIN, "llama-batched-bench"), "-m", args.model, "-c", str(64 * 256 + 256),
               "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", "128", "-npl", "64", "-t", str(threads),
               "--output-format", "jsonl"])
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{") and "speed_tg" in line:
            r = json.loads(line)
            # Output tokens over the whole run (prompt processing included), as our throughput.
            return (r["pl"] * r["tg"]) / r["t"], r["speed"]
    sys.exit("llama-batched-bench: no jsonl result line\n" + out[-2000:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--kvasir", default="build/tools/kvasir")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--output-json")
    ap.add_argument("--tg-depth", type=int, default=0, help="also llama-bench tg128 after this many tokens")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    load_before = os.getloadavg()
    cpu = cpu_model()
    samples = {}

    def add(key, value):
        samples.setdefault(key, []).append(value)

    for r in range(args.rounds):
        for t in threads:
            load = os.getloadavg()[0]
            kp, kd = kvasir_latency(args, t)
            lp, ld, ldd = llama_bench(args, t)
            add(f"t{t}.kvasir.prefill", kp); add(f"t{t}.kvasir.decode", kd)
            add(f"t{t}.llama.prefill", lp); add(f"t{t}.llama.decode", ld)
            add("load", load)
            deep = ""
            if ldd is not None:
                add(f"t{t}.llama.decode_deep", ldd)
                deep = f" tg@d{args.tg_depth} {ldd:.1f}"
            print(f"round {r} threads {t} (load {load:.2f}, {cpu}): kvasir pp {kp:.1f} tg {kd:.1f} | "
                  f"llama.cpp pp {lp:.1f} tg {ld:.1f}{deep}", file=sys.stderr)
        if not args.skip_throughput:
            t = max(threads)
            ko, kt = kvasir_throughput(args, t)
            lo, lt = llama_batched(args, t)
            add("tp.kvasir.out", ko); add("tp.kvasir.total", kt)
            add("tp.llama.out", lo); add("tp.llama.total", lt)
            print(f"round {r} throughput threads {t}: kvasir out {ko:.1f} | llama.cpp out {lo:.1f}", file=sys.stderr)

    med = {k: statistics.median(v) for k, v in samples.items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    print(f"\n{datetime.date.today()}, commit {commit}, {args.model}, {cpu}, {args.rounds} rounds interleaved, "
          f"medians; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}\n")
    print("| threads | metric | kvasir tok/s | llama.cpp tok/s | ratio |")
    print("|---|---|---|---|---|")
    for t in threads:
        for m, lm in (("prefill", "pp128"), ("decode", "tg128")):
            k, l = med[f"t{t}.kvasir.{m}"], med[f"t{t}.llama.{m}"]
            print(f"| {t} | {m} 128 (llama-bench {lm}) | {k:.1f} | {l:.1f} | {k / l:.2f}x |")
        if f"t{t}.llama.decode_deep" in med:
            k, l = med[f"t{t}.kvasir.decode"], med[f"t{t}.llama.decode_deep"]
            print(f"| {t} | decode 128 (llama-bench tg128 -d {args.tg_depth}) | {k:.1f} | {l:.1f} | {k / l:.2f}x |")
    if not args.skip_throughput:
        t = max(threads)
        k, l = med["tp.kvasir.out"], med["tp.llama.out"]
        single = med[f"t{t}.kvasir.decode"]
        print(f"| {t} | 64 x 128/128 output tok/s (llama-batched-bench -npl 64) | {k:.1f} | {l:.1f} | {k / l:.2f}x |")
        print(f"\nthroughput / single-request decode at {t} threads: {k / single:.2f}x")
    if args.output_json:
        json.dump({"commit": commit, "cpu": cpu, "samples": samples, "medians": med, "load_before": load_before},
                  open(args.output_json, "w"), indent=1)


if __name__ == "__main__":
    main()
