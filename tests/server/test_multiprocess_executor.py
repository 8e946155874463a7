"""The multiprocess executor, `kvasir serve --distributed-executor-backend mp` (vLLM's flag), on the
CPU: the server process keeps the API server, engine and scheduler, and every model rank runs in a
worker process (one at TP 1). Greedy completions, streamed or not and with --async-scheduling,
equal the in-process server's token for token (and at TP 3, with the ranks' own group); a worker
killed mid-stream ends every live request with an error, turns /health to 503 within a second, and
the server exits non-zero by itself with no process left; a worker that cannot start is named and
the server exits non-zero; the flag's values are checked (uni is TP 1 only; ray and
external_launcher are refused as not supported).
"""
import json
import os
import signal
import time

import httpx

from conftest import MODEL, MODEL_NAME, Server, free_port, kvasir_bin
from worker_processes import check_group_failed, stream_until_cut, wait_gone, workers_of

C = "/v1/completions"
FLAGS = ("--exact-matmul", "--threads", "1")
MP = ("--distributed-executor-backend", "mp")
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a land far away,"]








def complete(server, prompt, max_tokens):
    r = httpx.post(server.base + C, timeout=300, json={
        "model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def stream_text(server, prompt, max_tokens):
    text, finish = "", None
    with httpx.stream("POST", server.base + C, timeout=300, json={
            "model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[len("data: "):])["choices"][0]
            text += choice["text"]
            finish = choice.get("finish_reason") or finish
    assert finish == "length"
    return text


def test_one_worker_process_completes_and_streams_exactly_as_the_in_process_server():
    whole = Server(*FLAGS)
    try:
        want = [complete(whole, p, 16) for p in PROMPTS]
    finally:
        assert whole.stop() == 0, whole.logs()
    for extra in ((), ("--async-scheduling",)):
        mp = Server(*MP, *FLAGS, *extra)
        workers = workers_of(mp)
        try:
            assert len(workers) == 1, workers
            assert "multiprocess executor: 1 model rank(s) in worker processes" in mp.logs()
            assert [complete(mp, p, 16) for p in PROMPTS] == want, extra
            assert stream_text(mp, PROMPTS[0], 16) == want[0], extra
        finally:
            assert mp.stop() == 0, mp.logs()
        wait_gone(workers)


def test_three_model_ranks_in_worker_processes_complete_exactly_as_one():
    """TP 3 (SmolLM2 has 9 heads): three workers with their own group, the server holds none."""
    whole = Server(*FLAGS)
    try:
        want = [complete(whole, p, 8) for p in PROMPTS[:2]]
    finally:
        assert whole.stop() == 0, whole.logs()
    mp = Server(*MP, "--tensor-parallel-size", "3", *FLAGS)
    workers = workers_of(mp)
    try:
        assert len(workers) == 3, workers
        assert [complete(mp, p, 8) for p in PROMPTS[:2]] == want
    finally:
        assert mp.stop() == 0, mp.logs()
    wait_gone(workers)


def test_a_killed_worker_fails_every_stream_turns_health_503_and_the_server_exits_non_zero():
    s = Server(*MP, *FLAGS)
    workers = workers_of(s)
    assert len(workers) == 1, workers
    try:
        errors, killed_at = stream_until_cut(s.base, MODEL_NAME, lambda: os.kill(workers[0], signal.SIGKILL),
                                             prompts=PROMPTS)
        # The worker is rank 1 of the step group (the server is rank 0); the kill may land while the
        # step is sent or while its result is awaited.
        check_group_failed(s.base, errors, killed_at, naming="rank 1 exited or crashed")
        rc = s.proc.wait(timeout=15)
        assert rc != 0, s.logs()[-2000:]
        assert "model worker process failed" in s.logs(), s.logs()[-2000:]
    finally:
        s.stop(timeout=30)
    wait_gone(workers)


def run_serve(*args, env=None, timeout=60):
    import subprocess
    return subprocess.run([kvasir_bin(), "serve", *args, "--port", str(free_port())], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_a_worker_that_cannot_start_is_named_and_the_server_exits_non_zero():
    t0 = time.time()
    p = run_serve(MODEL, *MP, *FLAGS, env={**os.environ, "KVASIR_TEST_TP_WORKER_FAIL_AT_START": "1"})
    assert p.returncode != 0
    assert "--distributed-executor-backend mp" in p.stderr and "before joining the group" in p.stderr, p.stderr[-2000:]
    assert "model rank 0: internal: failing at start" in p.stderr, p.stderr[-2000:]
    assert time.time() - t0 < 20, "the failed worker must be noticed, not waited out"


def test_the_flag_is_documented_and_its_values_are_checked():
    p = run_serve("--help")
    assert p.returncode == 0
    assert "--distributed-executor-backend mp|uni" in p.stdout + p.stderr
    p = run_serve(MODEL, "--distributed-executor-backend", "uni", "--tensor-parallel-size", "3")
    assert p.returncode != 0 and "needs --tensor-parallel-size 1" in p.stderr, p.stderr[-2000:]
    for name in ("ray", "external_launcher"):
        p = run_serve(MODEL, "--distributed-executor-backend", name)
        assert p.returncode != 0 and f"--distributed-executor-backend {name} is not supported" in p.stderr, p.stderr
    p = run_serve(MODEL, "--distributed-executor-backend", "threads")
    assert p.returncode != 0 and "must be mp or uni" in p.stderr, p.stderr[-2000:]
