"""Pipeline parallelism through `kvasir serve --pipeline-parallel-size 2` on the CPU: the server
starts a worker process for the second stage (SmolLM2's 30 layers as 15 + 15), greedy completions
equal the unsplit server's token for token, and a SIGTERM stops both; Gemma 3 as 2 stages of 2
tensor-parallel ranks likewise. A stage-1 worker killed mid-stream ends every live request with an
error naming it, turns /health to 503 within a second, and the server exits non-zero by itself (the
tensor-parallel fault path). More stages than layers are refused before any worker starts.
`kvasir generate` with seeded sampling, logprobs, and ngram speculation or async scheduling gives
one stage's output byte for byte.
"""
import os
import signal
import threading

import pytest

from conftest import MODEL_NAME, REPO, Server
from worker_processes import check_group_failed, stream_until_cut, wait_gone, workers_of
from test_tensor_parallel import FLAGS, PROMPTS, complete, run_serve

C = "/v1/completions"
GEMMA = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")


def test_two_stages_complete_exactly_as_one_and_stop_together():
    whole = Server(*FLAGS)
    try:
        want = [complete(whole, p, 24) for p in PROMPTS]
    finally:
        assert whole.stop() == 0, whole.logs()
    split = Server("--pipeline-parallel-size", "2", *FLAGS)
    workers = workers_of(split)
    try:
        assert len(workers) == 1, workers
        got = [complete(split, p, 24) for p in PROMPTS]
        assert got == want
        # Several requests in one step: the step is cut into micro-batches across the stages.
        results = [None] * len(PROMPTS)

        def run(i):
            results[i] = complete(split, PROMPTS[i], 24)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert results == want
    finally:
        assert split.stop() == 0, split.logs()
    wait_gone(workers)

@pytest.mark.skipif(not os.path.exists(GEMMA), reason="models/gemma-3-270m-q4_k_m.gguf is not here")
def test_gemma3_two_stages_of_two_ranks_complete_exactly_as_one():
    prompts = PROMPTS[:2]
    whole = Server("--model", GEMMA, *FLAGS)
    try:
        want = [complete(whole, p, 16) for p in prompts]
    finally:
        assert whole.stop() == 0, whole.logs()
    split = Server("--model", GEMMA, "--pipeline-parallel-size", "2", "--tensor-parallel-size", "2", *FLAGS)
    workers = workers_of(split)
    try:
        assert len(workers) == 3, workers
        assert [complete(split, p, 16) for p in prompts] == want
    finally:
        assert split.stop() == 0, split.logs()
    wait_gone(workers)

def test_a_killed_stage_one_worker_fails_every_stream_turns_health_503_and_exits_non_zero():
    s = Server("--pipeline-parallel-size", "2", *FLAGS)
    workers = workers_of(s)
    try:
        errors, killed_at = stream_until_cut(s.base, MODEL_NAME, lambda: os.kill(workers[0], signal.SIGKILL),
                                             prompts=PROMPTS)
        check_group_failed(s.base, errors, killed_at, naming="rank 1")
        rc = s.proc.wait(timeout=15)
        assert rc != 0, s.logs()[-2000:]
    finally:
        s.stop(timeout=30)
    wait_gone(workers)

def test_more_stages_than_layers_are_refused_before_any_worker_starts():
    model = os.path.join(REPO, "tests/data/tiny/llama3/model.gguf")  # 2 layers
    p = run_serve(model, "--pipeline-parallel-size", "3", *FLAGS)
    assert p.returncode != 0
    assert "--pipeline-parallel-size 3" in p.stderr and "fewer than the pipeline parallel size (3)" in p.stderr, \
        p.stderr[-2000:]
    assert "tensor-parallel worker" not in p.stderr, "no worker may start"

def test_help_documents_pipeline_parallelism():
    p = run_serve("--help")
    assert p.returncode == 0
    text = p.stdout + p.stderr
    assert "--pipeline-parallel-size N" in text and "micro-batches" in text and "not supported yet" not in \
        text.split("--pipeline-parallel-size N")[1].split("--data-parallel-size")[0]

def test_generate_with_sampling_logprobs_speculation_or_async_scheduling_equals_one_stage(tmp_path):
    """`kvasir generate` through the same launch: seeded sampling, logprobs and prompt logprobs
    (several logits calls per step), with ngram speculation (several logits rows per sequence) or
    with async scheduling, give one stage's output byte for byte."""
    import subprocess
    from conftest import MODEL, kvasir_bin
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(
        '{"prompt": "1 2 3 4 5 6 7 8 1 2 3 4 5 6 7 8 1 2 3", "logprobs": 2, "prompt_logprobs": 1}\n'
        '{"prompt": "def fibonacci(n):", "temperature": 0.8, "seed": 5}\n'
        '{"prompt": "Once upon a time", "temperature": 0.7}\n')
    spec = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}']

    def generate(*extra):
        out = tmp_path / "out.jsonl"
        p = subprocess.run([kvasir_bin(), "generate", "--model", MODEL, "--input", str(prompts), "--output", str(out),
                            "--max-tokens", "24", "--seed", "3", *FLAGS, *extra],
                           capture_output=True, text=True, timeout=240)
        assert p.returncode == 0, p.stderr[-2000:]
        return out.read_text()

    for mode in (spec, ["--async-scheduling"]):
        want = generate(*mode)
        assert want.count("\n") == 3
        assert generate("--pipeline-parallel-size", "2", *mode) == want, mode
