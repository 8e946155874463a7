"""Tensor parallelism through `kvasir serve --tensor-parallel-size 3` on the CPU (SmolLM2 has 9
attention heads, so 3 ranks, not 2): the server starts its two worker processes, greedy completions
equal the unsplit server's token for token, a SIGTERM stops every process, and a worker killed
mid-stream ends every live request with an error, turns /health to 503 within a second, and the
server then exits non-zero by itself with every worker; a worker that cannot start is named and the
server exits non-zero; a model that cannot be split is refused before a worker starts.
"""
import os
import signal
import time

import httpx
import pytest

from conftest import MODEL_NAME, REPO, Server
from worker_processes import check_group_failed, stream_until_cut, wait_gone, workers_of

C = "/v1/completions"
FLAGS = ("--exact-matmul", "--threads", "1")






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
    wait_gone(workers)


GEMMA = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")


@pytest.mark.skipif(not os.path.exists(GEMMA), reason="models/gemma-3-270m-q4_k_m.gguf is not here")
def test_gemma3_two_ranks_complete_exactly_as_one():
    """Gemma 3 (4 heads, one KV head on both ranks, a 262k vocabulary split in two) through the
    server's own launch: greedy completions equal the unsplit server's."""
    prompts = PROMPTS[:2]
    whole = Server("--model", GEMMA, *FLAGS)
    try:
        want = [complete(whole, p, 16) for p in prompts]
    finally:
        assert whole.stop() == 0, whole.logs()
    split = Server("--model", GEMMA, "--tensor-parallel-size", "2", *FLAGS)
    try:
        assert len(workers_of(split)) == 1
        assert [complete(split, p, 16) for p in prompts] == want
    finally:
        assert split.stop() == 0, split.logs()


def test_a_killed_worker_fails_every_stream_turns_health_503_and_the_group_exits_non_zero():
    s = Server("--tensor-parallel-size", "3", *FLAGS)
    workers = workers_of(s)
    try:
        errors, killed_at = stream_until_cut(s.base, MODEL_NAME, lambda: os.kill(workers[1], signal.SIGKILL),
                                             prompts=PROMPTS)
        check_group_failed(s.base, errors, killed_at, naming="rank 2")
        # The server then exits by itself, non-zero, without a signal; every worker with it.
        rc = s.proc.wait(timeout=15)
        assert rc != 0, s.logs()[-2000:]
        assert "tensor-parallel group failed" in s.logs(), s.logs()[-2000:]
    finally:
        s.stop(timeout=30)
    wait_gone(workers)


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


def run_serve(*args, env=None, timeout=60):
    from conftest import free_port, kvasir_bin
    import subprocess
    return subprocess.run([kvasir_bin(), "serve", *args, "--port", str(free_port())], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_a_model_that_cannot_be_split_is_refused_before_any_worker_starts():
    from conftest import REPO
    model = os.path.join(REPO, "tests/data/tiny/gemma3/model.gguf")  # 2 attention heads
    t0 = time.time()
    p = run_serve(model, "--tensor-parallel-size", "4", *FLAGS)
    assert p.returncode != 0
    assert "must be divisible by tensor parallel size (4)" in p.stderr, p.stderr[-2000:]
    assert "tensor-parallel worker" not in p.stderr, "no worker may start for a model that cannot be split"
    assert time.time() - t0 < 20


def test_help_documents_the_parallel_flags_and_unbuilt_modes_are_refused():
    from conftest import MODEL
    p = run_serve("--help")
    assert p.returncode == 0
    for flag in ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
                 "--enable-expert-parallel"):
        assert flag in p.stdout + p.stderr, flag
    # --data-parallel-size is built (test_data_parallel.py), except beside tensor parallelism.
    p = run_serve(MODEL, "--data-parallel-size", "2", "--tensor-parallel-size", "3")
    assert p.returncode != 0 and "not supported yet" in p.stderr, p.stderr[-2000:]
    p = run_serve(MODEL, "--data-parallel-size", "1", "--help")
    assert p.returncode == 0, "size 1 is the default and accepted"
    # test_expert_parallel.py runs --enable-expert-parallel itself.
