"""The load generator's pieces (from service_load.py): its server, keep-alive connections, clients, tallies."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.helpers.server import cpu_seconds

FALLBACK_TEXTS = [
    "command line tool written in C to convert images between formats",
    "python library for parsing and writing audio files",
    "arcade puzzle game for the X window system",
    "network proxy server with caching for HTTP and FTP",
    "text editor with syntax highlighting for many languages",
    "SQL database server client tools and libraries",
    "fonts for the console and the terminal",
    "documentation for the GNU compiler collection",
]


def raise_fd_limit() -> int:
    """Room for a thousand connections at each end (the server inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Conn:
    """One keep-alive HTTP/1.1 connection: write a request, read status, headers and a Content-Length body."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**20)
        writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes | None, extra: str = "") -> tuple[int, dict, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        data = await self.reader.readexactly(int(headers.get("content-length", 0)))
        return int(lines[0][9:12]), headers, data

    def close(self) -> None:
        self.writer.close()


@dataclass
class Tally:
    """What the clients saw: per answered request its latency and status, whether a refusal said when to retry."""

    seconds: list[float] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    refusals_without_retry_after: int = 0
    connection_errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    def error(self, what: str) -> None:
        self.connection_errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(what)


async def client(
    port: int,
    bodies: list[bytes],
    offset: int,
    stop_at: float,
    tally: Tally,
    backoff: bool,
    auth: str,
    think_s: float = 0.0,
):
    """Closed loop on one keep-alive connection; with `think_s`, a pause of up to that long (uniform) after each
    answer, so that the connection is often idle when the server changes its state."""
    conn, i, pause = None, offset, np.random.default_rng(offset)
    while time.perf_counter() < stop_at:
        try:
            if conn is None:
                conn = await Conn.open(port)
            body = bodies[i % len(bodies)]
            i += 1
            start = time.perf_counter()
            status, headers, _ = await conn.request("POST", "/v1/predict", body, auth)
            tally.seconds.append(time.perf_counter() - start)
            tally.status.append(status)
            if headers.get("connection", "").lower() == "close":
                conn.close()
                conn = None
            if status in (429, 503):
                retry = headers.get("retry-after")
                if retry is None:
                    tally.refusals_without_retry_after += 1
                elif backoff:
                    await asyncio.sleep(min(float(retry), max(stop_at - time.perf_counter(), 0)))
            if think_s:
                await asyncio.sleep(pause.uniform(0, think_s))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            tally.error(f"{type(exc).__name__}: {exc}")
            if conn is not None:
                conn.close()
            conn = None
            await asyncio.sleep(0.01)
    if conn is not None:
        conn.close()


def ms(values: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(values, q) * 1e3), 2) if len(values) else None


def start_server(bundle: Path, port: int, max_queue: int | None, code_dir: Path, extra: dict) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XTAG_")}
    env.update({"XTAG_LOG_LEVEL": "warning", "PYTHONPATH": str(code_dir), **extra})
    if max_queue is not None:
        env["XTAG_MAX_QUEUE"] = str(max_queue)
    code = f"from xtag.service.server import serve; serve({str(bundle.resolve())!r}, '127.0.0.1', {port}, 1)"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=code_dir, env=env)
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            status, _, _ = asyncio.run(_once(port, "GET", "/ready"))
            if status == 200:
                return proc
        except (OSError, asyncio.IncompleteReadError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become ready in 300 s")


async def _once(port: int, method: str, path: str) -> tuple[int, dict, bytes]:
    conn = await Conn.open(port)
    try:
        return await conn.request(method, path, None)
    finally:
        conn.close()


def read_texts(path: Path, n: int) -> list[str]:
    """The first `n` texts of a JSONL(.gz) corpus."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line)["text"] for line, _ in zip(f, range(n))]


@contextmanager
def stopped(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """`proc` (a server), terminated when the block ends, killed if it has not exited 20 s later."""
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


async def interleaved(servers: dict[str, tuple[int, int]], path: str, bodies: list[bytes], repeat: int) -> dict:
    """Each body `repeat` times to every server in turn, request by request (the order rotating), so that the
    machine's other work falls on all alike; per server: each request's seconds and its process's CPU seconds."""
    keys = list(servers)
    conns = {key: await Conn.open(servers[key][0]) for key in keys}
    seconds: dict[str, list[float]] = {key: [] for key in keys}
    cpu = {key: cpu_seconds(servers[key][1]) for key in keys}
    try:
        for i in range(repeat * len(bodies)):
            for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
                t = time.perf_counter()
                status, _, _ = await conns[key].request("POST", path, bodies[i % len(bodies)])
                seconds[key].append(time.perf_counter() - t)
                assert status == 200, (key, status)
    finally:
        for conn in conns.values():
            conn.close()
    return {key: (np.array(seconds[key]), cpu_seconds(servers[key][1]) - cpu[key]) for key in keys}
