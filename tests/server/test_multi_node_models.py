"""Model families across a network boundary: tensor and pipeline parallel groups split over two
network namespaces (netns.py) by the built-in launcher (--nnodes 2, node 1 --headless), for the
families whose layers differ from the tiny Llama 3 of test_multi_node.py:
- Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf, the real checkpoint): 4 heads and one KV head
  (TP=2 replicates it), sliding and global layers, embedding scale, soft-capping-free logits;
- the tiny Qwen3-MoE (tests/data/tiny/qwen3_moe): experts sliced by TP, the router replicated;
- SmolLM2 (the default GGUF): 9 heads, so TP=2 is refused (vLLM's rule) and only PP=2 runs.
Greedy completions from node 0's server equal the unsplit server's token for token. Each run is
short (--threads 1, a few prompts, 12 tokens) so the module stays within a few minutes.
"""
import os
import signal
import subprocess

import httpx
import pytest

from conftest import MODEL, REPO, Server, kvasir_bin
from netns import two_hosts  # noqa: F401 (a fixture)
from test_multi_node import Node0, log_file, pids_in, wait_empty

NAME = "m"
HTTP_PORT = 8000  # inside node 0's fresh namespace: nothing else listens there
MASTER_PORT = 29556
MAX_TOKENS = 12
TEXT_PROMPTS = ["The capital of France is", "def fibonacci(n):"]
# The tiny models' vocabulary is a dummy one: their prompts are token ids.
ID_PROMPTS = [[100, 137, 174, 211, 48], [111, 148, 185, 222, 59, 96, 133, 170]]

GEMMA3 = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")
QWEN3_MOE = os.path.join(REPO, "tests", "data", "tiny", "qwen3_moe", "model.gguf")

# model id -> (path, max_model_len, prompts)
MODELS = {"gemma3": (GEMMA3, 256, TEXT_PROMPTS), "qwen3_moe": (QWEN3_MOE, 64, ID_PROMPTS),
          "smollm2": (MODEL, 256, TEXT_PROMPTS)}

CASES = [
    pytest.param("gemma3", ("--tensor-parallel-size", "2"), id="gemma3-tp2"),
    pytest.param("gemma3", ("--pipeline-parallel-size", "2"), id="gemma3-pp2"),
    pytest.param("qwen3_moe", ("--tensor-parallel-size", "2"), id="qwen3_moe-tp2"),
    pytest.param("qwen3_moe", ("--pipeline-parallel-size", "2"), id="qwen3_moe-pp2"),
    pytest.param("smollm2", ("--pipeline-parallel-size", "2"), id="smollm2-pp2"),
]


def engine(model):
    path, max_model_len, _ = MODELS[model]
    if not os.path.exists(path):
        pytest.skip(f"{path} is not here (scripts/fetch_models.sh)")
    return ("--model", path, "--served-model-name", NAME, "--exact-matmul", "--threads", "1",
            "--kv-cache-memory", "64MiB", "--max-num-seqs", "8", "--max-model-len", str(max_model_len))


def completions(base, model):
    """The greedy tokens of every prompt of the model."""
    out = []
    for prompt in MODELS[model][2]:
        r = httpx.post(base + "/v1/completions", timeout=120, json={
            "model": NAME, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
            "logprobs": 0})
        assert r.status_code == 200, r.text
        tokens = r.json()["choices"][0]["logprobs"]["tokens"]
        assert len(tokens) == MAX_TOKENS, tokens
        out.append(tokens)
    return out


_unsplit = {}


def unsplit(model):
    """The unsplit server's greedy completions (on the host's loopback), once per model."""
    if model not in _unsplit:
        s = Server(*engine(model), max_model_len=None)
        try:
            _unsplit[model] = completions(s.base, model)
        finally:
            assert s.stop() == 0, s.logs()
    return _unsplit[model]


def node_argv(hosts, node, model, layout):
    argv = [kvasir_bin(), "serve", *engine(model), *layout, "--port", str(HTTP_PORT), "--nnodes", "2",
            "--node-rank", str(node), "--master-addr", hosts.addrs[0], "--master-port", str(MASTER_PORT)]
    return argv + (["--headless"] if node else [])


@pytest.mark.parametrize("model,layout", CASES)
def test_family_split_across_namespaces_completes_exactly_as_unsplit(two_hosts, model, layout, tmp_path):
    want = unsplit(model)
    hosts = two_hosts
    # Node 1 first: its rank dials rank 0 until it listens.
    node1 = hosts.popen(1, node_argv(hosts, 1, model, layout), stdout=log_file(tmp_path, "node1.log"),
                        stderr=subprocess.STDOUT)
    node0 = Node0(hosts, hosts.popen(0, node_argv(hosts, 0, model, layout), stdout=log_file(tmp_path, "node0.log"),
                                     stderr=subprocess.STDOUT), tmp_path / "node0.log")
    node0.wait_healthy(others=[node1], timeout=120)
    assert len(pids_in(hosts, 0)) == 1 and len(pids_in(hosts, 1)) == 1
    with hosts.inside(0):
        got = completions(node0.base, model)
    assert got == want, node0.logs()
    node0.proc.send_signal(signal.SIGTERM)
    assert node0.proc.wait(timeout=30) == 0, node0.logs()
    assert node1.wait(timeout=15) == 0, (tmp_path / "node1.log").read_text()[-3000:]
    assert wait_empty(hosts) == [[], []], "a rank outlived the group"
