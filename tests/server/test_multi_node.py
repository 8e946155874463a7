"""Tensor parallelism across a network boundary: two network namespaces joined by a veth pair
(netns.py), one node in each, talking TCP over 10.201.0.0/24. Launched two ways:
- kvasir's own launcher: the same `kvasir serve` in each namespace with --nnodes 2 --node-rank K
  --master-addr 10.201.0.1 (node 1 --headless), each node starting its own ranks;
- Open MPI's mpirun, with the namespaces as its hosts: its rsh agent starts Open MPI's daemon in
  each namespace (so mpirun's own traffic crosses the link too), and each MPI rank is one
  tensor-parallel rank.
Greedy completions from node 0's server equal the unsplit server's token for token; SIGTERM to
node 0 stops every rank with status 0; killing node 1's rank mid-stream ends every live request
with an error, turns /health 503 within a second and every process exits non-zero.

The model is the tiny Llama 3 (4 heads, 2 KV heads: TP=2 splits the KV heads, TP=4 replicates
them) with --max-model-len past its 64 positions so a stream lasts long enough to be cut.
A layout is a parameter (LAYOUTS): tensor parallel over the nodes, a pipeline stage per node, and
two stages of two tensor-parallel ranks (each stage on one node with kvasir's launcher, each stage
spanning both nodes under mpirun; and, on loopback, four simulated hosts with each stage spanning
two of them).
"""
import json
import os
import shutil
import signal
import subprocess
import time

import httpx
import pytest

from conftest import REPO, Server, free_port, kvasir_bin
from worker_processes import check_group_failed, stream_until_cut
from netns import two_hosts  # noqa: F401 (a fixture)

TINY = os.path.join(REPO, "tests", "data", "tiny", "llama3", "model.gguf")
NAME = "tiny"
HTTP_PORT = 8000    # inside node 0's fresh namespace: nothing else listens there
MASTER_PORT = 29555
MAX_MODEL_LEN = 4096
ENGINE = ("--model", TINY, "--served-model-name", NAME, "--exact-matmul", "--threads", "1",
          "--kv-cache-memory", "64MiB", "--max-num-seqs", "16")
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]

# (flags that make the group, ranks in it); every layout is split over the two nodes.
LAYOUTS = [
    pytest.param(("--tensor-parallel-size", "2"), 2, id="tp2-one-rank-per-node"),
    pytest.param(("--tensor-parallel-size", "4"), 4, id="tp4-two-ranks-per-node"),
    # A stage per node: the hidden states cross the link point to point between the stages.
    pytest.param(("--pipeline-parallel-size", "2"), 2, id="pp2-one-stage-per-node"),
    # Two stages of two tensor-parallel ranks. The built-in launcher gives each node contiguous
    # ranks, so each stage is one node (its TP group over shared memory); mpirun's --map-by node
    # alternates hosts, so each stage's TP group spans both nodes (over TCP).
    pytest.param(("--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"), 4, id="tp2-pp2"),
]

# Which transport each stage's tensor-parallel group takes, by launcher (rank_setup.cpp says it).
STAGE_GROUPS = {"built-in": "meet over shared memory (one host)", "mpirun": "meet over TCP (across hosts)"}
STAGES_SPAN_HOSTS = STAGE_GROUPS["mpirun"]


def check_stage_groups(layout, logs, launcher):
    if "--pipeline-parallel-size" in layout and "--tensor-parallel-size" in layout:
        for stage in (0, 1):
            said = f"pipeline stage {stage}: its tensor-parallel ranks {2 * stage}..{2 * stage + 1} "
            assert said + STAGE_GROUPS[launcher] in logs, logs


def node_argv(hosts, node, layout):
    argv = [kvasir_bin(), "serve", *ENGINE, "--max-model-len", str(MAX_MODEL_LEN), *layout, "--port", str(HTTP_PORT),
            "--nnodes", "2", "--node-rank", str(node), "--master-addr", hosts.addrs[0],
            "--master-port", str(MASTER_PORT)]
    return argv + (["--headless"] if node else [])


def complete(base, prompt, max_tokens=24):
    r = httpx.post(base + "/v1/completions", timeout=60, json={
        "model": NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


@pytest.fixture(scope="module")
def want():
    """The unsplit server's greedy completions (on the host's loopback)."""
    s = Server(*ENGINE, max_model_len=MAX_MODEL_LEN)
    try:
        return [complete(s.base, p) for p in PROMPTS]
    finally:
        assert s.stop() == 0, s.logs()


class Node0:
    """Node 0's server as the test sees it from inside its namespace."""
    base = f"http://127.0.0.1:{HTTP_PORT}"

    def __init__(self, hosts, proc, log_path):
        self.hosts, self.proc, self.log_path = hosts, proc, log_path

    def logs(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def wait_healthy(self, others=(), timeout=60):
        deadline = time.time() + timeout
        with self.hosts.inside(0):
            while time.time() < deadline:
                for p in (self.proc, *others):
                    if p.poll() is not None:
                        raise RuntimeError(f"a node exited with {p.returncode}:\n{self.logs()}")
                try:
                    if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        raise RuntimeError(f"node 0 did not become healthy:\n{self.logs()}")


def log_file(tmp_path, name):
    return open(tmp_path / name, "wb")


def start_nodes(hosts, layout, tmp_path):
    """Node 1 first: its ranks dial rank 0 until it listens."""
    node1 = hosts.popen(1, node_argv(hosts, 1, layout), stdout=log_file(tmp_path, "node1.log"),
                        stderr=subprocess.STDOUT)
    node0 = Node0(hosts, hosts.popen(0, node_argv(hosts, 0, layout), stdout=log_file(tmp_path, "node0.log"),
                                     stderr=subprocess.STDOUT), tmp_path / "node0.log")
    node0.wait_healthy(others=[node1])
    return node0, node1


def pids_in(hosts, node):
    r = subprocess.run(["ip", "netns", "pids", hosts.names[node]], capture_output=True, text=True, timeout=10)
    return [int(p) for p in r.stdout.split()]


def wait_empty(hosts, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline and any(pids_in(hosts, n) for n in (0, 1)):
        time.sleep(0.1)
    return [pids_in(hosts, n) for n in (0, 1)]


@pytest.mark.parametrize("layout,ranks", LAYOUTS)
def test_built_in_launcher_across_namespaces_completes_exactly_as_one_rank(two_hosts, layout, ranks, want, tmp_path):
    hosts = two_hosts
    node0, node1 = start_nodes(hosts, layout, tmp_path)
    # Each node runs its half of the ranks: its launched process and the ones that started.
    assert len(pids_in(hosts, 0)) == ranks // 2 and len(pids_in(hosts, 1)) == ranks // 2
    with hosts.inside(0):
        got = [complete(node0.base, p) for p in PROMPTS]
    assert got == want
    check_stage_groups(layout, (tmp_path / "node0.log").read_text() + (tmp_path / "node1.log").read_text(), "built-in")
    node0.proc.send_signal(signal.SIGTERM)
    assert node0.proc.wait(timeout=30) == 0, node0.logs()
    assert node1.wait(timeout=15) == 0, (tmp_path / "node1.log").read_text()[-3000:]
    assert wait_empty(hosts) == [[], []], "a rank outlived the group"


@pytest.mark.parametrize("layout,ranks", LAYOUTS)
def test_built_in_launcher_a_killed_remote_rank_fails_every_stream_and_every_process(two_hosts, layout, ranks,
                                                                                    tmp_path):
    """Node 1's launched rank is killed; with two ranks per node, the rank it started goes too."""
    hosts = two_hosts
    node0, node1 = start_nodes(hosts, layout, tmp_path)
    with hosts.inside(0):
        errors, killed_at = stream_until_cut(node0.base, NAME, lambda: node1.send_signal(signal.SIGKILL),
                                             max_tokens=MAX_MODEL_LEN - 32, prompts=PROMPTS, timeout=60)
        check_group_failed(node0.base, errors, killed_at)
    assert node0.proc.wait(timeout=15) != 0, node0.logs()
    assert "tensor-parallel group failed" in node0.logs(), node0.logs()
    assert node1.wait(timeout=5) != 0
    assert wait_empty(hosts) == [[], []], "a rank outlived the group"


def test_bad_launch_flags_are_refused_by_name():
    def serve(*flags, env=None):
        return subprocess.run([kvasir_bin(), "serve", *ENGINE, "--port", "0", *flags], capture_output=True, text=True,
                              timeout=60, env={**os.environ, **(env or {})})
    cases = [
        (("--tensor-parallel-size", "4", "--nnodes", "3", "--master-addr", "127.0.0.1"), None,
         "--nnodes 3 does not divide the world size 4"),
        (("--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1"), None,
         "--node-rank 2 is not in [0, 2)"),
        (("--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "1"), None, "needs --master-addr"),
        (("--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1", "--headless"), None,
         "--headless on --node-rank 0"),
        (("--tensor-parallel-size", "2", "--master-addr", "127.0.0.1"), None, "--master-addr applies to ranks"),
        (("--tensor-parallel-size", "2", "--headless"), None, "--headless applies to a node other than node 0"),
        (("--tensor-parallel-size", "2"), {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3",
                                            "OMPI_COMM_WORLD_LOCAL_SIZE": "3"},
         "mpirun started 3 processes but --tensor-parallel-size is 2"),
    ]
    for flags, env, says in cases:
        p = serve(*flags, env=env)
        assert p.returncode == 2 and says in p.stderr, (flags, p.returncode, p.stderr[-2000:])


def test_help_documents_the_launch_flags():
    p = subprocess.run([kvasir_bin(), "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0
    for flag in ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless", "mpirun"):
        assert flag in p.stdout + p.stderr, flag


def test_a_started_worker_that_cannot_start_is_named_over_tcp_too():
    """Node 0 of --nnodes 2 at TP=4 starts rank 1 itself; it fails, and rank 0 says so at once
    instead of waiting out the join timeout (node 1 never comes)."""
    t0 = time.time()
    p = subprocess.run([kvasir_bin(), "serve", *ENGINE, "--port", "0", "--tensor-parallel-size", "4", "--nnodes", "2",
                        "--master-addr", "127.0.0.1", "--master-port", str(free_port())],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "KVASIR_TEST_TP_WORKER_FAIL_AT_START": "1"})
    assert p.returncode != 0
    assert "worker rank 1 exited" in p.stderr and "before joining the group" in p.stderr, p.stderr[-2000:]
    assert time.time() - t0 < 20, "the failed worker must be noticed, not waited out"


def test_a_master_port_in_use_is_named():
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = subprocess.run([kvasir_bin(), "serve", *ENGINE, "--port", "0", "--tensor-parallel-size", "2",
                            "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)],
                           capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"--master-port {port}" in p.stderr and "in use" in p.stderr, p.stderr[-2000:]


# mpirun as on a real cluster: the namespaces are its hosts (--host names them), and its rsh agent
# (what would be ssh) starts Open MPI's daemon in each: `ip netns exec HOST` with its own UTS
# hostname. mpirun itself runs in node 0's namespace, so each daemon reaches it over the link
# (oob_tcp_if_include pins Open MPI's own traffic to the link's subnet), then starts its rank.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
RSH_AGENT = """#!/bin/sh
# Open MPI's rsh agent for network-namespace hosts: "agent HOST COMMAND..." runs COMMAND in HOST.
host=$1; shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host; $*"
"""


def mpirun_argv(hosts, layout, ranks, agent):
    per_node = ranks // 2
    return [shutil.which("mpirun"), "--host", ",".join(f"{n}:{per_node}" for n in hosts.names),
            "--mca", "plm_rsh_agent", str(agent), "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "oob_tcp_if_include", f"{hosts.addrs[0]}/24", "--bind-to", "none", "--map-by", "node:OVERSUBSCRIBE",
            "-np", str(ranks), kvasir_bin(), "serve", *ENGINE, "--max-model-len", str(MAX_MODEL_LEN), *layout,
            "--port", str(HTTP_PORT), "--master-addr", hosts.addrs[0], "--master-port", str(MASTER_PORT)]


def mpi_rank_pids(hosts):
    """{MPI rank: (pid, node)} of the kvasir processes in the namespaces."""
    out = {}
    for node in (0, 1):
        for pid in pids_in(hosts, node):
            try:
                with open(f"/proc/{pid}/environ", "rb") as e:
                    env = dict(kv.split(b"=", 1) for kv in e.read().split(b"\0") if b"=" in kv)
                with open(f"/proc/{pid}/comm") as c:
                    comm = c.read().strip()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if comm == "kvasir" and b"OMPI_COMM_WORLD_RANK" in env:
                out[int(env[b"OMPI_COMM_WORLD_RANK"])] = (pid, node)
    return out


def start_mpirun(hosts, layout, ranks, tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed (scripts/setup.sh installs openmpi-bin)")
    agent = tmp_path / "netns_rsh_agent.sh"
    agent.write_text(RSH_AGENT)
    agent.chmod(0o755)
    log = tmp_path / "mpirun.log"
    proc = hosts.popen(0, mpirun_argv(hosts, layout, ranks, agent), stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                       env={**os.environ, **MPI_ENV})
    node0 = Node0(hosts, proc, log)
    node0.wait_healthy()
    pids = mpi_rank_pids(hosts)
    assert sorted(pids) == list(range(ranks)), (pids, node0.logs())
    return node0, pids


@pytest.mark.parametrize("layout,ranks", LAYOUTS)
def test_mpirun_across_namespaces_completes_exactly_as_one_rank(two_hosts, layout, ranks, want, tmp_path):
    hosts = two_hosts
    node0, pids = start_mpirun(hosts, layout, ranks, tmp_path)
    # mpirun's --map-by node puts ranks 0, 2, .. on node 0 and 1, 3, .. on node 1.
    assert {rank: node for rank, (_, node) in pids.items()} == {r: r % 2 for r in range(ranks)}, pids
    with hosts.inside(0):
        got = [complete(node0.base, p) for p in PROMPTS]
    assert got == want
    check_stage_groups(layout, (tmp_path / "mpirun.log").read_text(), "mpirun")
    # MPI rank 0 serves: stopping it stops the group, and mpirun exits 0 with every rank.
    os.kill(pids[0][0], signal.SIGTERM)
    assert node0.proc.wait(timeout=30) == 0, node0.logs()
    assert wait_empty(hosts) == [[], []], "a rank or an Open MPI daemon outlived mpirun"


@pytest.mark.parametrize("layout,ranks", LAYOUTS)
def test_mpirun_a_killed_remote_rank_fails_every_stream_and_every_process(two_hosts, layout, ranks, tmp_path):
    hosts = two_hosts
    node0, pids = start_mpirun(hosts, layout, ranks, tmp_path)
    with hosts.inside(0):
        errors, killed_at = stream_until_cut(node0.base, NAME, lambda: os.kill(pids[1][0], signal.SIGKILL),
                                             max_tokens=MAX_MODEL_LEN - 32, prompts=PROMPTS, timeout=60)
        # Open MPI aborts the whole job when a rank dies, racing rank 0's own 503.
        check_group_failed(node0.base, errors, killed_at, torn_down_by_launcher=True)
    assert node0.proc.wait(timeout=15) != 0, node0.logs()
    assert wait_empty(hosts) == [[], []], "a rank or an Open MPI daemon outlived mpirun"


def test_built_in_launcher_stages_spanning_simulated_hosts_meet_over_tcp(want, tmp_path):
    """TP=2 x PP=2 with kvasir's own launcher over four "hosts" on this host's loopback: --nnodes 4
    (one rank per node) and each node its own $KVASIR_HOST_ID, so each stage's tensor-parallel group
    spans two hosts and meets over TCP (the namespaces above give each stage one node). Completions
    equal the unsplit server's; SIGTERM to node 0 stops every node with status 0."""
    master, http = free_port(), free_port()
    procs = []
    try:
        for node in (3, 2, 1, 0):  # node 0 last: the others dial it until it listens
            argv = [kvasir_bin(), "serve", *ENGINE, "--max-model-len", str(MAX_MODEL_LEN), "--tensor-parallel-size", "2",
                    "--pipeline-parallel-size", "2", "--port", str(http), "--nnodes", "4", "--node-rank", str(node),
                    "--master-addr", "127.0.0.1", "--master-port", str(master)] + (["--headless"] if node else [])
            procs.append(subprocess.Popen(argv, stdout=log_file(tmp_path, f"node{node}.log"), stderr=subprocess.STDOUT,
                                          env={**os.environ, "KVASIR_HOST_ID": f"simulated-host-{node}"}))
        node0 = procs[-1]
        base = f"http://127.0.0.1:{http}"
        deadline = time.time() + 60
        while True:
            assert all(p.poll() is None for p in procs), (tmp_path / "node0.log").read_text()[-3000:]
            assert time.time() < deadline, "node 0 did not become healthy:\n" + (tmp_path / "node0.log").read_text()
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert [complete(base, p) for p in PROMPTS] == want
        logs = "".join((tmp_path / f"node{n}.log").read_text() for n in range(4))
        for stage in (0, 1):
            assert f"pipeline stage {stage}: its tensor-parallel ranks {2 * stage}..{2 * stage + 1} " \
                   f"{STAGES_SPAN_HOSTS}" in logs, logs
        node0.send_signal(signal.SIGTERM)
        assert [p.wait(timeout=30) for p in procs] == [0, 0, 0, 0], logs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
