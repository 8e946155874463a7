"""`kvasir serve --enable-expert-parallel` (vLLM's flag) on the CPU: with --tensor-parallel-size 2
the tiny Qwen3-MoE's 8 experts are distributed whole over the two ranks, and greedy completions
equal the unsplit server's token for token; a model without experts is refused with a clear
message, at one rank or several, before any worker starts.
"""
import os

import httpx

from conftest import REPO, Server
from test_tensor_parallel import FLAGS, run_serve
from worker_processes import workers_of

TINY_MOE = os.path.join(REPO, "tests/data/tiny/qwen3_moe/model.gguf")
PROMPTS = [[100, 137, 174, 211, 48], [111, 148, 185, 222, 59, 96, 133, 170], [122, 159]]


def completions(server):
    out = []
    for prompt in PROMPTS:
        r = httpx.post(server.base + "/v1/completions", timeout=120, json={
            "model": "smol", "prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True,
            "logprobs": 0})
        assert r.status_code == 200, r.text
        out.append(r.json()["choices"][0]["logprobs"]["tokens"])
    return out


def test_experts_spread_over_two_ranks_complete_exactly_as_one():
    whole = Server("--model", TINY_MOE, *FLAGS, max_model_len=64)
    try:
        want = completions(whole)
        assert all(len(tokens) == 12 for tokens in want), want
    finally:
        assert whole.stop() == 0, whole.logs()
    split = Server("--model", TINY_MOE, "--tensor-parallel-size", "2", "--enable-expert-parallel", *FLAGS,
                   max_model_len=64)
    try:
        assert len(workers_of(split)) == 1, "rank 1 runs in its own process"
        assert completions(split) == want
    finally:
        assert split.stop() == 0, split.logs()


def test_a_model_without_experts_is_refused():
    dense = os.path.join(REPO, "tests/data/tiny/llama3/model.gguf")
    for tp in ("1", "2"):
        p = run_serve(dense, "--tensor-parallel-size", tp, "--enable-expert-parallel", *FLAGS)
        assert p.returncode != 0
        assert "--enable-expert-parallel" in p.stderr, p.stderr[-2000:]
        assert "needs a mixture-of-experts model; the llama model has no experts" in p.stderr, p.stderr[-2000:]
        assert "tensor-parallel worker" not in p.stderr, "no worker may start"
