"""Servers whose model runs in worker processes (tensor and pipeline parallel groups, the
multiprocess executor, multi-node groups): their workers, and a rank killed while requests stream
(three live streams, a kill once all three have tokens flowing, then every stream still live must
end with an error and /health must say 503 within a second)."""
import json
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
    /health. Returns (errors by stream index, the cut: {"at": time of the kill, "watch": ...,
    "completed": streams that received all max_tokens tokens, "cut_off": streams whose connection
    broke without an error event} or {} when no kill happened).
    A tiny model computes a stream's tokens faster than a loaded client reads them, so a stream
    may have been finished in the engine before the kill and still be delivering its last chunks
    after it; it was not live at the kill (a dead rank computes no token), so it is told apart by
    its usage: every one of its max_tokens tokens, finish reason "length"."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    errors, killed, flowing, completed, cut_off = {}, {}, set(), set(), set()
    cut = threading.Lock()

    def finished_by_length(events):
        return any('"finish_reason":"length"' in e.replace(" ", "") for e in events[-3:])

    def stream(i, prompt):
        try:
            read_stream(i, prompt)
        except httpx.TransportError:
            cut_off.add(i)  # the server went away mid-response (a launcher's job abort)

    def read_stream(i, prompt):
        chunks = 0
        events = []
        with httpx.stream("POST", base + "/v1/completions", json={**body, "prompt": prompt}, timeout=timeout) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = line[len("data: "):]
                if '"error"' in event:
                    errors[i] = event
                    return
                usage = json.loads(event).get("usage")
                if usage and usage.get("completion_tokens") == max_tokens and finished_by_length(events):
                    completed.add(i)
                events.append(event)
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
    if killed:
        killed["completed"], killed["cut_off"] = completed, cut_off
    return errors, killed


def check_group_failed(base, errors, killed, num_streams=len(PROMPTS), naming=None, torn_down_by_launcher=False):
    """Every stream live at the kill ended with an error (each naming `naming`, when given), at least
    one did, and /health answered 503 within a second of the kill. torn_down_by_launcher: a launcher that ends the whole job when a
    rank dies (Open MPI's mpirun) may take the server down before its first 503, and before it
    sends a stream its error event; the server gone within that second then counts too, and so
    does a stream whose connection broke."""
    assert killed, "the streams ended before a rank could be killed"
    watcher, seen = killed["watch"]
    watcher.join()
    live = [i for i in range(num_streams) if i not in killed["completed"]]
    failed = set(errors) | (killed["cut_off"] if torn_down_by_launcher else set())
    assert failed, f"no stream failed (completed before the kill: {sorted(killed['completed'])})"
    assert sorted(failed) == live, f"every live request must end with an error: {errors}, completed before the " \
        f"kill: {sorted(killed['completed'])}, cut off: {sorted(killed['cut_off'])}"
    if naming is not None:
        assert all(naming in e for e in errors.values()), errors
    if torn_down_by_launcher and not seen:
        assert killed["gone"] and killed["gone"][0] - killed["at"] <= 1.0, \
            "/health must answer 503, or the job be gone, within a second of the rank's death"
        return
    assert seen and seen[0] - killed["at"] <= 1.0, "/health must answer 503 within a second of the rank's death"
