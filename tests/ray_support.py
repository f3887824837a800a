"""A real local Ray cluster for tests: a head and worker nodes as separate `ray start` processes on loopback.

Every port is picked free and the session lives in its own temp dir, so clusters of parallel test runs do
not meet; teardown kills each node's whole session (raylet, GCS, workers) instead of `ray stop`, which
would stop every Ray process of the user on the machine.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RAY = [sys.executable, "-m", "ray.scripts.scripts"]  # this interpreter's Ray, whatever bin/ray's shebang says
OBJECT_STORE_BYTES = 200 * 2**20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_args(cpus: int) -> list[str]:
    ports = ("--dashboard-agent-listen-port", "--metrics-export-port", "--runtime-env-agent-port")
    args = ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus)]
    args += ["--object-store-memory", str(OBJECT_STORE_BYTES)]
    for flag in ports:
        args += [flag, str(free_port())]
    return args


def session_pids(leader: int) -> list[int]:
    """Every process of the session a node's `ray start` leads (its workers lead process groups of their own)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == leader:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _kill_session(leader: int) -> None:
    for pid in session_pids(leader):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class LocalCluster:
    """The cluster's address and node processes; `add_worker` joins one more node, `kill_worker_tasks` kills
    the task processes of one node (Ray retries their tasks elsewhere)."""

    def __init__(self, cpus: int, temp: Path):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = temp
        self.nodes: list[subprocess.Popen] = []
        self.env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
        head = ["start", "--head", "--port", str(self.port), "--include-dashboard", "false", "--temp-dir", str(temp)]
        self._start(head + _node_args(cpus), "head")
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.nodes[0].poll() is not None:
                    raise RuntimeError(
                        f"the Ray head did not start: {(temp / 'head.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.2)

    def _start(self, args: list[str], name: str) -> None:
        log = open(self.temp / f"{name}.log", "w")  # noqa: SIM115 - the node writes it until teardown
        self.nodes.append(
            subprocess.Popen([*RAY, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )

    def add_worker(self, cpus: int = 1) -> None:
        self._start(["start", "--address", self.address, *_node_args(cpus)], f"worker{len(self.nodes)}")

    def wait_for_nodes(self, count: int, timeout: float = 60) -> None:
        """Until `count` nodes are alive, checked through a short-lived driver in a subprocess."""
        script = (
            "import ray,sys,time\n"
            f"ray.init(address='{self.address}', _node_ip_address='127.0.0.1', logging_level='ERROR')\n"
            f"end=time.time()+{timeout}\n"
            f"while sum(n['Alive'] for n in ray.nodes())<{count} and time.time()<end: time.sleep(0.3)\n"
            f"sys.exit(0 if sum(n['Alive'] for n in ray.nodes())>={count} else 1)\n"
        )
        done = subprocess.run([sys.executable, "-c", script], env=self.env, capture_output=True, timeout=timeout + 30)
        if done.returncode:
            raise RuntimeError(f"only some of {count} Ray nodes joined: {done.stderr.decode()[-2000:]}")

    def task_pids(self, node: int) -> list[int]:
        """The worker processes (ray::...) of node `node` (0 = head)."""
        out = []
        for pid in session_pids(self.nodes[node].pid):
            try:
                name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if name.startswith(b"ray::") and not name.startswith((b"ray::Dashboard", b"ray::RuntimeEnv")):
                out.append(pid)
        return out

    def kill_running(self, title: str, stop: threading.Event, after_s: float = 0.0) -> int | None:
        """SIGKILL the first worker process (any node) seen running task `title` once it has run `after_s`
        seconds, as a node's crash would; its pid, or None when `stop` is set first. For a thread beside a driver."""
        seen: dict[int, float] = {}
        while not stop.is_set():
            for node in range(len(self.nodes)):
                for pid in self.task_pids(node):
                    try:
                        running = Path(f"/proc/{pid}/cmdline").read_bytes().startswith(f"ray::{title}".encode())
                    except OSError:
                        continue
                    if running and time.monotonic() - seen.setdefault(pid, time.monotonic()) >= after_s:
                        os.kill(pid, signal.SIGKILL)
                        return pid
            stop.wait(0.005)
        return None

    def stop(self) -> None:
        for node in reversed(self.nodes):
            _kill_session(node.pid)
            node.wait(timeout=30)


@contextmanager
def local_cluster(workers: int = 1, cpus: int = 1) -> Iterator[LocalCluster]:
    """A head of `cpus` CPUs and `workers` worker nodes of `cpus` each, all alive when it yields."""
    with tempfile.TemporaryDirectory(prefix="xtag-ray-") as temp:
        cluster = LocalCluster(cpus, Path(temp))
        try:
            for _ in range(workers):
                cluster.add_worker(cpus)
            cluster.wait_for_nodes(1 + workers)
            yield cluster
        finally:
            cluster.stop()
