"""Fixtures for the OpenAI-compatible server tests: a real `kvasir serve` on a free loopback port.

The binary comes from $KVASIR_BIN, else build/tools/kvasir under the repository root. The model is
the default one (models/SmolLM2-135M-Instruct.Q4_1.gguf) with a small KV cache, so the whole suite
stays inside a few minutes on a 2-core machine.

$KVASIR_TEST_DATA_PARALLEL=D starts every server of the suite with `--data-parallel-size D` (unless
a test chooses its own parallel sizes): `KVASIR_TEST_DATA_PARALLEL=2 pytest tests/server` runs the
whole suite against two engine replicas. CI runs the DP_SUBSET files that way (scripts/test.sh).

$KVASIR_TEST_DATA_PARALLEL_NODES=1 runs the suite against two replicas on two nodes instead (two
network namespaces; dp_nodes.py): every server is node 0 with one replica, its second replica a
--headless process in node 1's namespace. Needs root.
"""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.environ.get("KVASIR_TEST_MODEL", os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
MODEL_NAME = "smol"
DATA_PARALLEL = os.environ.get("KVASIR_TEST_DATA_PARALLEL", "")
DATA_PARALLEL_NODES = None
if os.environ.get("KVASIR_TEST_DATA_PARALLEL_NODES", "") not in ("", "0"):
    sys.path.insert(0, os.path.dirname(__file__))
    from dp_nodes import DataParallelNodes
    DATA_PARALLEL_NODES = DataParallelNodes()  # before any thread: this process moves into node 0

# 1,000 concurrent connections need more than the usual 1,024 descriptors (the server inherits it).
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _soft != resource.RLIM_INFINITY and (_hard == resource.RLIM_INFINITY or _soft < _hard):
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(_hard, 65536) if _hard != resource.RLIM_INFINITY else 65536, _hard))


def kvasir_bin():
    path = os.environ.get("KVASIR_BIN") or os.path.join(REPO, "build", "tools", "kvasir")
    if not os.path.exists(path):
        pytest.skip(f"kvasir binary not found at {path} (set KVASIR_BIN)")
    return path


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `kvasir serve` child process."""

    def __init__(self, *extra_args, env=None, max_model_len=512):
        """max_model_len=None leaves --max-model-len out (the server derives it)."""
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        mml = ["--max-model-len", str(max_model_len)] if max_model_len is not None else []
        own_sizes = any(a in ("--data-parallel-size", "--tensor-parallel-size") for a in extra_args)
        if DATA_PARALLEL and not DATA_PARALLEL_NODES and not own_sizes:
            extra_args = (*extra_args, "--data-parallel-size", DATA_PARALLEL)
        args = [kvasir_bin(), "serve", MODEL, "--port", str(self.port), "--served-model-name", MODEL_NAME,
                "--kv-cache-memory", "256MiB", *mml, "--max-num-seqs", "256",
                "--max-num-batched-tokens", "2048", "--max-body-bytes", str(1 << 20), *extra_args]
        self.log_path = f"/tmp/kvasir_serve_test_{self.port}.log"
        self.log = open(self.log_path, "wb")
        env = {**os.environ, **(env or {})}
        self.node1 = None  # the --headless node of KVASIR_TEST_DATA_PARALLEL_NODES
        if DATA_PARALLEL_NODES and not own_sizes:
            rpc_port = DATA_PARALLEL_NODES.rpc_port()
            self.node1_log = open(self.log_path + ".node1", "wb")
            self.node1 = DATA_PARALLEL_NODES.start_node1(args, rpc_port, self.node1_log, env)
            args = [*args, *DATA_PARALLEL_NODES.node0_flags(rpc_port)]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        self.wait_healthy()

    def wait_healthy(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvasir serve exited with {self.proc.returncode}:\n{self.logs()}")
            if self.node1 is not None and self.node1.poll() is not None:
                with open(self.log_path + ".node1", "rb") as f:
                    node1 = f.read().decode(errors="replace")[-3000:]
                raise RuntimeError(f"node 1 (--headless) exited with {self.node1.returncode}:\n{node1}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"kvasir serve did not become healthy:\n{self.logs()}")

    def logs(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def metrics(self, per_engine=False):
        """Series name -> value. With data-parallel replicas the engine series come as the total
        (no engine label) and once per replica (engine="i"); only the totals unless per_engine, so
        sums over a name prefix mean the same at any --data-parallel-size."""
        text = httpx.get(self.base + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            if not per_engine and 'engine="' in line:
                continue
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
        return out

    def metric(self, prefix):
        """The value of the first series whose name starts with `prefix`."""
        for name, value in self.metrics().items():
            if name.startswith(prefix):
                return value
        raise KeyError(prefix)

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if self.node1 is not None:
            # Node 0 stops its remote replica as it shuts down: node 1 then exits by itself.
            try:
                node1_rc = self.node1.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.node1.kill()
                node1_rc = self.node1.wait()
            self.node1_log.close()
            if self.proc.returncode == 0 and node1_rc != 0:
                return f"node 1 exited with {node1_rc}"
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    rc = s.stop()
    assert rc == 0, f"kvasir serve exited with {rc}:\n{s.logs()}"


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server.base, timeout=120) as c:
        yield c


def assert_error_envelope(resp, status):
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    return err
