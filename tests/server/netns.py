"""Hosts for the multi-node tests: network namespaces joined by a veth pair, so ranks talk over a
real (virtual) link, not loopback. Needs root and `ip netns`; `Hosts.make` skips loudly otherwise.
Every name carries this process's id and a counter, so concurrent runs never collide, and
`Hosts.close` always deletes what `make` created and kills every process started in them.

The test process itself enters a namespace only through `Hosts.inside(i)` (setns on this thread;
threads and sockets made inside stay in it), so an HTTP client can reach node 0's server on its
loopback without giving the namespace a route to the host.
"""
import contextlib
import ctypes
import itertools
import os
import shutil
import subprocess

import pytest

CLONE_NEWNET = 0x40000000
SUBNET = "10.201.0"
_counter = itertools.count()


def _ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def _setns(fd):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


class Hosts:
    def __init__(self, names, addrs):
        self.names = names  # network namespace of node i
        self.addrs = addrs  # its address on the link
        self.procs = []

    @classmethod
    def make(cls, count=2):
        if os.geteuid() != 0:
            pytest.skip("network-namespace tests need root (ip netns add)")
        if shutil.which("ip") is None:
            pytest.skip("network-namespace tests need iproute2's `ip`")
        if count != 2:
            raise ValueError("one veth pair joins exactly two namespaces")
        tag = f"{os.getpid() % 100000}x{next(_counter)}"
        hosts = cls([f"kvasir-{tag}-n{i}" for i in range(count)], [f"{SUBNET}.{i + 1}" for i in range(count)])
        created = []
        try:
            for n in hosts.names:
                try:
                    _ip("netns", "add", n)
                except RuntimeError as e:
                    if not created:
                        pytest.skip(f"network namespaces are not available here: {e}")
                    raise
                created.append(n)
            veth = [f"kv{tag}{c}"[:15] for c in "ab"]
            _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
            for n, v, a in zip(hosts.names, veth, hosts.addrs):
                _ip("link", "set", v, "netns", n)
                _ip("-n", n, "addr", "add", f"{a}/24", "dev", v)
                _ip("-n", n, "link", "set", v, "up")
                _ip("-n", n, "link", "set", "lo", "up")
        except BaseException:
            hosts.names = created
            hosts.close()
            raise
        return hosts

    def popen(self, node, argv, **kw):
        """Starts argv in node's namespace (`ip netns exec` execs it: the pid is argv's own)."""
        p = subprocess.Popen(["ip", "netns", "exec", self.names[node], *argv], **kw)
        self.procs.append(p)
        return p

    def track(self, proc):
        self.procs.append(proc)
        return proc

    @contextlib.contextmanager
    def inside(self, node):
        here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        there = os.open(f"/run/netns/{self.names[node]}", os.O_RDONLY)
        try:
            _setns(there)
            try:
                yield
            finally:
                _setns(here)
        finally:
            os.close(here)
            os.close(there)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        # What those started in turn (a node's own workers): everything in these namespaces is ours.
        for n in self.names:
            r = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True, timeout=10)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
        for n in self.names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=10)


@pytest.fixture
def two_hosts():
    hosts = Hosts.make(2)
    try:
        yield hosts
    finally:
        hosts.close()
