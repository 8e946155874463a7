"""Servers whose model runs in worker processes (tensor and pipeline parallel groups, the
multiprocess executor, multi-node groups): their workers, and a rank killed while requests stream
(three live streams, a kill once all three have tokens flowing, then every stream must end with an
error and /health must say 503 within a second)."""
import threading
import time

import httpx


def workers_of(server):
    """The pids of the server's child processes (its workers)."""
    pid = server.proc.pid
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, seconds=15):
    deadline = time.time() + seconds
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids), "a worker outlived the server"


PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):"]


def stream_until_cut(base, model, kill, max_tokens=400, prompts=PROMPTS, timeout=120):
    """Streams every prompt at once; whichever stream first sees all of them flowing calls kill()
    (on a loaded machine the first stream may finish before the last starts). Returns (errors by
    stream index, [time of the kill] or [])."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    errors, killed_at, flowing = {}, [], set()
    cut = threading.Lock()

    def stream(i, prompt):
        chunks = 0
        with httpx.stream("POST", base + "/v1/completions", json={**body, "prompt": prompt}, timeout=timeout) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = line[len("data: "):]
                if '"error"' in event:
                    errors[i] = event
                    return
                chunks += 1
                flowing.add(i)
                with cut:
                    if chunks >= 3 and len(flowing) == len(prompts) and not killed_at:
                        kill()
                        killed_at.append(time.time())

    threads = [threading.Thread(target=stream, args=(i, p)) for i, p in enumerate(prompts)]
    for t in threads:  # started where the caller is (inside a network namespace, for one)
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    return errors, killed_at


def check_group_failed(base, errors, killed_at, num_streams=len(PROMPTS), naming=None):
    """Every stream ended with an error (each naming `naming`, when given) and /health turned 503
    within a second of the kill (or the server was already gone)."""
    assert killed_at, "the streams ended before a rank could be killed"
    assert sorted(errors) == list(range(num_streams)), f"every live request must end with an error: {errors}"
    if naming is not None:
        assert all(naming in e for e in errors.values()), errors
    status = None
    while time.time() < killed_at[0] + 1.0:
        try:
            status = httpx.get(base + "/health", timeout=1).status_code
        except httpx.TransportError:
            break  # already gone: the caller checks that it exited in time
        if status == 503:
            break
        time.sleep(0.05)
    assert status == 503, "/health must answer 503 within a second of the rank's death"
