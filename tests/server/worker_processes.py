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


def watch_health(base, seconds=1.0, gone=None):
    """From now on, polls /health until it answers 503 or `seconds` pass. Returns (thread, seen):
    once the thread ends, seen holds the time of the first 503, if any. Started at the kill itself,
    so a group whose launcher then tears the server down quickly (mpirun aborts the whole job) is
    still seen saying 503 first. `gone`, when given, receives the time /health first stopped
    answering."""
    seen = []
    deadline = time.time() + seconds

    def poll():
        while time.time() < deadline and not seen:
            try:
                if httpx.get(base + "/health", timeout=max(0.05, deadline - time.time())).status_code == 503:
                    seen.append(time.time())
            except httpx.TransportError:
                if gone is not None and not gone:
                    gone.append(time.time())
                pass  # not answering (yet, or any more): keep asking until the deadline
            time.sleep(0.02)

    t = threading.Thread(target=poll)
    t.start()
    return t, seen


def stream_until_cut(base, model, kill, max_tokens=400, prompts=PROMPTS, timeout=120):
    """Streams every prompt at once; whichever stream first sees all of them flowing calls kill()
    (on a loaded machine the first stream may finish before the last starts) and starts watching
    /health. Returns (errors by stream index, the cut: {"at": time of the kill, "watch": ...} or
    {} when no kill happened)."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    errors, killed, flowing = {}, {}, set()
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
                    if chunks >= 3 and len(flowing) == len(prompts) and not killed:
                        kill()
                        killed["at"] = time.time()
                        killed["gone"] = []
                        killed["watch"] = watch_health(base, gone=killed["gone"])

    threads = [threading.Thread(target=stream, args=(i, p)) for i, p in enumerate(prompts)]
    for t in threads:  # started where the caller is (inside a network namespace, for one)
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    return errors, killed


def check_group_failed(base, errors, killed, num_streams=len(PROMPTS), naming=None, torn_down_by_launcher=False):
    """Every stream ended with an error (each naming `naming`, when given) and /health answered 503
    within a second of the kill. torn_down_by_launcher: a launcher that ends the whole job when a
    rank dies (Open MPI's mpirun) may take the server down before its first 503; the server gone
    within that second then counts too."""
    assert killed, "the streams ended before a rank could be killed"
    watcher, seen = killed["watch"]
    watcher.join()
    assert sorted(errors) == list(range(num_streams)), f"every live request must end with an error: {errors}"
    if naming is not None:
        assert all(naming in e for e in errors.values()), errors
    if torn_down_by_launcher and not seen:
        assert killed["gone"] and killed["gone"][0] - killed["at"] <= 1.0, \
            "/health must answer 503, or the job be gone, within a second of the rank's death"
        return
    assert seen and seen[0] - killed["at"] <= 1.0, "/health must answer 503 within a second of the rank's death"
