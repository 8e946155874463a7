"""Data parallelism across a network boundary: two network namespaces joined by a veth pair
(netns.py), `--data-parallel-size 2 --data-parallel-size-local 1` with one replica per node.
Node 0 runs the API server, the routing and both replicas' schedulers, and replica 0's model;
node 1 (`--headless --data-parallel-start-rank 1`) runs replica 1's model, which node 0 reaches
over TCP at --data-parallel-address:--data-parallel-rpc-port + 1 (api/remote_replica.h).

Greedy completions equal the single server's and both replicas serve (per-replica series of
/metrics, engine="i"); a repeated long prefix goes to one replica, whose prefix-cache hits grow
while the other's stay put; node 1 killed mid-stream ends every live request with an error,
/health 503 within a second, node 0 exits non-zero (and killed while idle, node 0 exits within
the keep-alive); bad flags are refused by name. The model is
the tiny Llama 3 with --max-model-len past its 64 positions so a stream lasts long enough to cut.
"""
import os
import signal
import subprocess

import httpx
import pytest

from conftest import MODEL, REPO, Server, free_port, kvasir_bin
from netns import two_hosts  # noqa: F401 (a fixture)
from test_multi_node import Node0, log_file, pids_in, wait_empty
from worker_processes import check_group_failed, stream_until_cut

TINY = os.path.join(REPO, "tests", "data", "tiny", "llama3", "model.gguf")
NAME = "tiny"
HTTP_PORT = 8000  # inside node 0's fresh namespace: nothing else listens there
RPC_PORT = 29650
MAX_MODEL_LEN = 1024
ENGINE = ("--model", TINY, "--served-model-name", NAME, "--exact-matmul", "--threads", "1",
          "--kv-cache-memory", "64MiB", "--max-num-seqs", "16", "--max-model-len", str(MAX_MODEL_LEN))
SMOL_ENGINE = ("--model", MODEL, "--served-model-name", NAME, "--threads", "1", "--kv-cache-memory", "64MiB",
               "--max-num-seqs", "16", "--max-model-len", str(MAX_MODEL_LEN))
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time", "Rivers are"]


def node_argv(hosts, node, engine=ENGINE):
    argv = [kvasir_bin(), "serve", *engine, "--port", str(HTTP_PORT), "--data-parallel-size", "2",
            "--data-parallel-size-local", "1", "--data-parallel-address", hosts.addrs[0],
            "--data-parallel-rpc-port", str(RPC_PORT)]
    return argv + (["--headless", "--data-parallel-start-rank", "1"] if node else [])


def start_nodes(hosts, tmp_path, engine=ENGINE):
    """Node 1 first: its replica dials node 0 until it listens."""
    node1 = hosts.popen(1, node_argv(hosts, 1, engine), stdout=log_file(tmp_path, "node1.log"),
                        stderr=subprocess.STDOUT)
    node0 = Node0(hosts, hosts.popen(0, node_argv(hosts, 0, engine), stdout=log_file(tmp_path, "node0.log"),
                                     stderr=subprocess.STDOUT), tmp_path / "node0.log")
    node0.wait_healthy(others=[node1])
    return node0, node1


def complete(base, prompt, max_tokens=16):
    r = httpx.post(base + "/v1/completions", timeout=60, json={
        "model": NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def per_engine(base, name, extra=""):
    """[replica 0's, replica 1's] value of series `name`."""
    text = httpx.get(base + "/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    out = []
    for i in (0, 1):
        key = f'{name}{{model_name="{NAME}",engine="{i}"{extra}}}'
        assert key in values, (key, sorted(values))
        out.append(values[key])
    return out


def finished(base):
    return [sum(v) for v in zip(*(per_engine(base, "kvasir:request_success_total", f',finished_reason="{r}"')
                                   for r in ("stop", "length", "abort", "error")))]


def delta(after, before):
    return [a - b for a, b in zip(after, before)]


def stop_nodes(hosts, node0, node1, tmp_path):
    node0.proc.send_signal(signal.SIGTERM)
    assert node0.proc.wait(timeout=30) == 0, node0.logs()
    assert node1.wait(timeout=15) == 0, (tmp_path / "node1.log").read_text()[-3000:]
    assert wait_empty(hosts) == [[], []], "a replica outlived the server"


@pytest.fixture(scope="module")
def want():
    """The single server's greedy completions (one engine, on the host's loopback)."""
    s = Server(*ENGINE, max_model_len=None)
    try:
        return [complete(s.base, p) for p in PROMPTS]
    finally:
        assert s.stop() == 0, s.logs()


def test_replicas_on_two_nodes_complete_exactly_as_one_engine_and_both_serve(two_hosts, want, tmp_path):
    hosts = two_hosts
    node0, node1 = start_nodes(hosts, tmp_path)
    assert len(pids_in(hosts, 0)) == 1 and len(pids_in(hosts, 1)) == 1
    with hosts.inside(0):
        got = [complete(node0.base, p) for p in PROMPTS]  # one at a time: idle replicas alternate
        done = finished(node0.base)
    assert got == want
    assert done[0] >= 1 and done[1] >= 1, f"both replicas must serve distinct prompts: {done}"
    assert "data-parallel replica 1: on another node" in node0.logs(), node0.logs()
    stop_nodes(hosts, node0, node1, tmp_path)


def test_a_repeated_prefix_goes_to_the_replica_that_caches_it_across_nodes(two_hosts, tmp_path):
    """SmolLM2: its real vocabulary tells two prefixes apart (the tiny model's maps most
    characters to one unknown token)."""
    hosts = two_hosts
    node0, node1 = start_nodes(hosts, tmp_path, engine=SMOL_ENGINE)
    prefix = "Document: " + " ".join(f"w{i}" for i in range(60)) + ". "  # ~180 tokens: many full blocks
    homes = []
    with hosts.inside(0):
        for rounds in range(2):  # twice: each replica is a prefix's home once
            base = node0.base
            hits0, done0 = per_engine(base, "kvasir:prefix_cache_hits_total"), finished(base)
            tag = ("Alpha", "Bravo")[rounds]
            for q in range(4):
                complete(base, tag + prefix + f"Question {q}?", max_tokens=2)
            hits = delta(per_engine(base, "kvasir:prefix_cache_hits_total"), hits0)
            done = delta(finished(base), done0)
            assert sorted(done) == [0, 4], f"every request with the shared prefix on one replica: {done}"
            home = 0 if done[0] else 1
            assert hits[home] >= 3 * 96, hits  # requests 2..4 found the prefix's ~100+ tokens there
            assert hits[1 - home] == 0, hits
            homes.append(home)
            # One more request: ties go round-robin over the requests, so after five the next
            # prefix's first request starts at the other replica.
            complete(base, f"Interlude {rounds}", max_tokens=2)
    assert sorted(homes) == [0, 1], f"idle replicas alternate, so the second prefix lives on the other: {homes}"
    stop_nodes(hosts, node0, node1, tmp_path)


def test_the_remote_node_killed_mid_stream_fails_every_stream_and_node_zero_exits(two_hosts, tmp_path):
    """SmolLM2, slow enough at one thread that every stream is still live when node 1 dies (the
    tiny model finishes replica 0's streams first)."""
    hosts = two_hosts
    node0, node1 = start_nodes(hosts, tmp_path, engine=SMOL_ENGINE)
    with hosts.inside(0):
        errors, killed = stream_until_cut(node0.base, NAME, lambda: node1.send_signal(signal.SIGKILL),
                                          max_tokens=MAX_MODEL_LEN - 32, prompts=PROMPTS[:3], timeout=60)
        check_group_failed(node0.base, errors, killed, naming="data-parallel replica")
    assert node0.proc.wait(timeout=15) != 0, node0.logs()
    assert "data-parallel group (a replica on another node) failed" in node0.logs(), node0.logs()
    assert wait_empty(hosts) == [[], []], "a process outlived the group"


def test_an_idle_remote_node_killed_ends_node_zero_too(two_hosts, tmp_path):
    """No request in flight: the keep-alive node 0 sends every 5 s finds the link gone, and the
    server exits non-zero instead of waiting for a request to fail."""
    hosts = two_hosts
    node0, node1 = start_nodes(hosts, tmp_path)
    node1.send_signal(signal.SIGKILL)
    assert node0.proc.wait(timeout=15) != 0, node0.logs()
    assert "a data-parallel replica's node was lost while idle" in node0.logs(), node0.logs()
    assert wait_empty(hosts) == [[], []], "a process outlived the group"


def test_bad_data_parallel_flags_are_refused_by_name():
    def serve(*flags):
        return subprocess.run([kvasir_bin(), "serve", *ENGINE, "--port", "0", *flags], capture_output=True, text=True,
                              timeout=60)
    cases = [
        (("--data-parallel-size-local", "1"), "--data-parallel-size-local needs --data-parallel-size > 1"),
        (("--data-parallel-address", "10.0.0.1"), "--data-parallel-address needs --data-parallel-size > 1"),
        (("--data-parallel-size", "2", "--data-parallel-size-local", "3"),
         "--data-parallel-size-local 3 is not in [0, 2]"),
        (("--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-start-rank", "1"),
         "--data-parallel-start-rank 1 without --headless"),
        (("--data-parallel-size", "2", "--data-parallel-size-local", "1", "--headless"),
         "--headless with --data-parallel-start-rank 0"),
        (("--data-parallel-size", "2", "--data-parallel-size-local", "2", "--data-parallel-start-rank", "1",
          "--headless"), "--data-parallel-start-rank 1 + --data-parallel-size-local 2 is past --data-parallel-size 2"),
        (("--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-rpc-port", "65535"),
         "--data-parallel-rpc-port 65535"),
        (("--data-parallel-size", "2", "--data-parallel-size-local", "1", "--tensor-parallel-size", "2"),
         "--data-parallel-size with --tensor-parallel-size > 1 is not supported yet"),
    ]
    for flags, says in cases:
        p = serve(*flags)
        assert p.returncode == 2 and says in p.stderr, (flags, p.returncode, p.stderr[-2000:])


def test_a_remote_node_that_never_joins_is_named():
    """Node 0 waits for replica 1's node at its port; with nobody there it says where it waited."""
    port = free_port()  # replica 1's: --data-parallel-rpc-port + 1
    p = subprocess.run([kvasir_bin(), "serve", *ENGINE, "--port", "0", "--data-parallel-size", "2",
                        "--data-parallel-size-local", "1", "--data-parallel-rpc-port", str(port - 1)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "KVASIR_TEST_DP_JOIN_TIMEOUT_MS": "1000"})
    assert p.returncode != 0
    assert f"data-parallel replica 1 at --data-parallel-address 127.0.0.1 port {port}" in p.stderr, p.stderr[-2000:]
    assert "its node did not join" in p.stderr, p.stderr[-2000:]


def test_help_documents_the_data_parallel_flags():
    p = subprocess.run([kvasir_bin(), "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    for flag in ("--data-parallel-size-local", "--data-parallel-start-rank", "--data-parallel-address",
                 "--data-parallel-rpc-port", "--headless"):
        assert flag in p.stdout + p.stderr, flag
