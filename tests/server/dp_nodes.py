"""The suite against data-parallel replicas on two nodes: $KVASIR_TEST_DATA_PARALLEL_NODES=1.

At conftest's import this process makes two network namespaces joined by a veth pair (netns.py)
and moves its main thread into node 0's, before any thread or server exists, so every server,
client and thread of the suite lives there and reaches its server on node 0's loopback as usual.
Each `Server` then runs `--data-parallel-size 2 --data-parallel-size-local 1`: replica 0 in the
server's process on node 0, replica 1 in a `--headless` process in node 1's namespace, reached
over the link (api/remote_replica.h). Every server has its own --data-parallel-rpc-port. At exit
this process leaves the namespaces and deletes them with everything still in them.
"""
import atexit
import os
import random
import socket
import subprocess

from netns import Hosts, _setns


def _port_pair_free(port):
    for p in (port, port + 1):
        with socket.socket() as s:
            try:
                s.bind(("", p))
            except OSError:
                return False
    return True


class DataParallelNodes:
    def __init__(self):
        if os.geteuid() != 0:
            raise RuntimeError("KVASIR_TEST_DATA_PARALLEL_NODES=1 needs root (ip netns add)")
        self.hosts = Hosts.make(2)
        self.home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        there = os.open(f"/run/netns/{self.hosts.names[0]}", os.O_RDONLY)
        try:
            _setns(there)
        finally:
            os.close(there)
        atexit.register(self.close)

    def rpc_port(self):
        """A port with its successor free on node 0 (replica 1 meets node 0 at port + 1)."""
        while True:
            port = random.randrange(30000, 60000)
            if _port_pair_free(port):
                return port

    def node0_flags(self, rpc_port):
        return ("--data-parallel-size", "2", "--data-parallel-size-local", "1",
                "--data-parallel-address", self.hosts.addrs[0], "--data-parallel-rpc-port", str(rpc_port))

    def start_node1(self, argv, rpc_port, log, env):
        """argv: node 0's command line without the data-parallel flags."""
        flags = ("--headless", "--data-parallel-size", "2", "--data-parallel-size-local", "1",
                 "--data-parallel-start-rank", "1", "--data-parallel-address", self.hosts.addrs[0],
                 "--data-parallel-rpc-port", str(rpc_port))
        return self.hosts.popen(1, [*argv, *flags], stdout=log, stderr=subprocess.STDOUT, env=env)

    def close(self):
        if self.home < 0:
            return
        _setns(self.home)  # out of node 0's namespace first: its processes are killed below
        os.close(self.home)
        self.home = -1
        self.hosts.close()
