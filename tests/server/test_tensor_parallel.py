"""Tensor parallelism through `kvasir serve --tensor-parallel-size 3` on the CPU (SmolLM2 has 9
attention heads, so 3 ranks, not 2): the server starts its two worker processes, greedy completions
equal the unsplit server's token for token, a SIGTERM stops every process, and a worker killed
mid-stream ends the live request with an error, turns /health to 503 and leaves no process behind.
"""
import os
import signal
import time

import httpx

from conftest import MODEL_NAME, Server

C = "/v1/completions"
FLAGS = ("--exact-matmul", "--threads", "1")


def workers_of(server):
    """The pids of the server's child processes (its tensor-parallel workers)."""
    pid = server.proc.pid
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def complete(server, prompt, max_tokens):
    r = httpx.post(server.base + C, timeout=300, json={
        "model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a land far away,"]


def test_three_ranks_complete_exactly_as_one_and_stop_together():
    whole = Server(*FLAGS)
    try:
        want = [complete(whole, p, 24) for p in PROMPTS]
    finally:
        assert whole.stop() == 0, whole.logs()
    split = Server("--tensor-parallel-size", "3", *FLAGS)
    workers = workers_of(split)
    try:
        assert len(workers) == 2, workers
        got = [complete(split, p, 24) for p in PROMPTS]
        assert got == want
    finally:
        assert split.stop() == 0, split.logs()
    deadline = time.time() + 15
    while any(alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(w) for w in workers), "a worker outlived the server"


def test_a_killed_worker_fails_the_stream_and_turns_health_to_503():
    s = Server("--tensor-parallel-size", "3", *FLAGS)
    workers = workers_of(s)
    try:
        body = {"model": MODEL_NAME, "prompt": PROMPTS[0], "max_tokens": 400, "temperature": 0,
                "ignore_eos": True, "stream": True}
        error, chunks, killed_at = None, 0, None
        with httpx.stream("POST", s.base + C, json=body, timeout=120) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = line[len("data: "):]
                if '"error"' in event:
                    error = event
                    break
                chunks += 1
                if chunks == 3:
                    os.kill(workers[1], signal.SIGKILL)
                    killed_at = time.time()
        assert killed_at is not None, "the stream ended before a worker could be killed"
        assert error is not None and "rank 2" in error, error
        deadline = time.time() + 1.0
        status = None
        while time.time() < deadline:
            status = httpx.get(s.base + "/health", timeout=5).status_code
            if status == 503:
                break
            time.sleep(0.05)
        assert status == 503
    finally:
        assert s.stop(timeout=30) == 0, s.logs()
    deadline = time.time() + 15
    while any(alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(w) for w in workers), "a worker outlived the server"


def test_a_worker_that_cannot_start_is_named_and_the_server_exits_non_zero():
    from conftest import MODEL, free_port, kvasir_bin
    import subprocess
    env = {**os.environ, "KVASIR_TEST_TP_WORKER_FAIL_AT_START": "1"}
    t0 = time.time()
    p = subprocess.run([kvasir_bin(), "serve", MODEL, "--port", str(free_port()), "--tensor-parallel-size", "3",
                        *FLAGS], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "worker rank" in p.stderr and "before joining the group" in p.stderr, p.stderr[-2000:]
    assert time.time() - t0 < 20, "the failed worker must be noticed, not waited out"
