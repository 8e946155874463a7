"""A short soak (scripts/soak.py): streaming clients with varied prompt and output lengths, then an
open-loop phase above capacity against a tiny --max-num-queued-reqs, then a few seconds of hostile
clients (issue 14's findings: large uploads, n x prompts over the queue bound, prompt + max_tokens
over max_model_len, half-closed clients, streams cut mid-way, slow readers, HEAD probes, no Host,
gzip bodies, malformed JSON, no API key) among normal streams that replay a pool of requests. The
server runs with --api-key. Passes only with zero 5xx and zero connection errors, every stream
ending with a finish_reason and [DONE] with its streamed token count equal to
usage.completion_tokens, overload answered only with 429/503 + Retry-After, every hostile request
answered with its expected status and reason, the normal streams' answers equal to an undisturbed
run, one client abort per cut stream, KV usage back to 0 within a second of idle after each phase
and /health p99 under 50 ms. The RSS slope is reported but only bounded loosely here (a minute is
too short to tell a leak from warm-up; the 10-minute figures are in BENCHMARKS.md).
Seconds: $KVASIR_SOAK_SECONDS (default 30) for the closed loop, a third of it for the overload
and a quarter for the hostile phase (at least 5 s each)."""
import json
import os
import subprocess
import sys

from conftest import MODEL, REPO, kvasir_bin


def test_short_soak(tmp_path):
    seconds = float(os.environ.get("KVASIR_SOAK_SECONDS", "30"))
    out = tmp_path / "soak.json"
    cmd = [sys.executable, os.path.join(REPO, "scripts", "soak.py"), "--kvasir", kvasir_bin(), "--model-path", MODEL,
           "--server-log", str(tmp_path / "server.log"),
           "--server-arg=--kv-cache-memory=128MiB", "--server-arg=--max-model-len=512",
           "--server-arg=--max-num-seqs=16", "--server-arg=--max-num-queued-reqs=8",
           "--clients", "8", "--duration", str(seconds), "--max-tokens", "32", "--max-prompt-words", "100",
           "--overload-duration", str(max(5.0, seconds / 3)), "--overload-rate", "80", "--require-rejections",
           # 4 normal + 4 hostile streams at most: within the queue bound of 8, so no 429 is expected.
           "--hostile-duration", str(max(5.0, seconds / 4)), "--hostile-clients", "4", "--hostile-normal-clients", "4",
           "--hostile-pool", "6",
           "--warmup", str(seconds / 2), "--max-rss-slope", "200",
           "--health-p99-ms", os.environ.get("KVASIR_SOAK_HEALTH_P99_MS", "50"), "--json", str(out)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=seconds * 3 + 300)
    text = p.stdout.decode(errors="replace")
    assert out.exists(), text[-3000:]
    summary = json.loads(out.read_text())
    print(json.dumps({k: summary[k] for k in ("closed", "overload", "rss_mib", "kv_back_to_zero_s", "health",
                                              "hostile_phase")}))
    assert summary["pass"], (summary["failures"], summary["first_errors"],
                             summary.get("hostile_phase", {}).get("hostile", {}).get("first_mismatches"))
    assert summary["overload"]["status"].get("429", 0) > 0
    hostile = summary["hostile_phase"]
    assert hostile["hostile"]["mismatches"] == 0 and hostile["normal"]["answer_mismatches"] == 0
    assert set(hostile["hostile"]["by_kind"]) >= {"large_upload", "over_queue_bound", "over_max_model_len", "half_close",
                                                  "cut_mid_stream", "slow_reader", "head_probe", "no_host", "gzip_body",
                                                  "malformed_json", "no_api_key"}
    assert hostile["client_aborts"] == hostile["streams_cut"] > 0
    assert summary["server_exit"] == 0
