"""A benchmark server on 127.0.0.1 and requests timed against it, what the service benchmarks share: from
service_latency.py (server, keep-alive connection, concurrent clients, percentiles, CPU seconds), guard_cost.py
(`timed`) and cold_start.py (`time_to_ready`)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench.helpers.results import ROOT


def free_port() -> int:
    """A free loopback port: the first free one of BENCH_PORTS ("LOW-HIGH", a shared machine's allotted range) when
    set, else any the system picks."""
    low, _, high = os.environ.get("BENCH_PORTS", "").partition("-")
    for port in range(int(low), int(high) + 1) if high else ():
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    bundle: Path, port: int, batching: str, code_dir: Path | None = None, workers: int = 1, **extra_env: str
) -> subprocess.Popen:
    """`code_dir`: serve another checkout's code (a folder holding an `xtag` package, as service_load.py's);
    `workers`: `xtag serve --workers`."""
    env = {
        **os.environ,
        "XTAG_BATCHING": batching,
        "XTAG_LOG_LEVEL": "warning",
        "XTAG_MAX_BATCH_DOCUMENTS": "1024",
        **extra_env,
    }
    if code_dir is not None:
        env["PYTHONPATH"] = str(code_dir)
    code = f"from xtag.service.server import serve; serve({str(bundle.resolve())!r}, '127.0.0.1', {port}, {workers})"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=code_dir or ROOT, env=env)
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            status, _ = asyncio.run(_once(port, "GET", "/ready", None))
            if status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not become ready in 180 s")


class Conn:
    """One keep-alive HTTP/1.1 connection: write a request, read status + Content-Length body."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        headers = await self.reader.readuntil(b"\r\n\r\n")
        status = int(headers[9:12])
        length = 0
        for line in headers.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def _once(port: int, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
    conn = await Conn.open(port)
    try:
        return await conn.request(method, path, body)
    finally:
        conn.close()


async def _clients(port: int, bodies: list[bytes], concurrency: int, path: str) -> tuple[np.ndarray, float]:
    """Send every body once over `concurrency` connections; returns per-request seconds and wall time."""
    conns = [await Conn.open(port) for _ in range(concurrency)]
    times = np.zeros(len(bodies))
    queue = list(range(len(bodies)))[::-1]

    async def worker(conn: Conn) -> None:
        while queue:
            i = queue.pop()
            t = time.perf_counter()
            status, _ = await conn.request("POST", path, bodies[i])
            times[i] = time.perf_counter() - t
            if status != 200:
                raise RuntimeError(f"HTTP {status} on {path}")

    start = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    wall = time.perf_counter() - start
    for c in conns:
        c.close()
    return times, wall


def ms(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q) * 1e3)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc), to see overhead apart from scheduling delays."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(port: int, path: str, bodies: list[bytes]) -> np.ndarray:
    """Each body once over one keep-alive connection, one at a time; seconds per request at the client."""
    conn = await Conn.open(port)
    times = np.empty(len(bodies))
    try:
        for i, body in enumerate(bodies):
            t = time.perf_counter()
            status, answer = await conn.request("POST", path, body)
            times[i] = time.perf_counter() - t
            if status != 200:
                raise RuntimeError(f"HTTP {status} on {path}: {answer[:300]!r}")
    finally:
        conn.close()
    return times


def time_to_ready(command: list[str], port: int, env: dict | None = None, timeout: float = 300) -> tuple[float, dict]:
    """Seconds from starting `command` (an `xtag serve` on `port`) to the first 200 from GET /ready (bundle loaded
    and warmed up), and that answer's body; the server is stopped after."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - start < timeout:
            if proc.poll() is not None:
                sys.exit(f"xtag serve exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1) as response:
                    if response.status == 200:
                        return time.perf_counter() - start, json.loads(response.read())
            except OSError:
                pass
            time.sleep(0.02)
        sys.exit("xtag serve was not ready in time")
    finally:
        proc.terminate()
        proc.wait(30)
