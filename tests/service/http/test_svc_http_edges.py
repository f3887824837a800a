"""HTTP edges against a real `xtag serve` process: 413 reaches clients that write the whole body first,
and SIGTERM lets an in-flight request finish before the process exits."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import requests

from tests.install_mode import pythonpath_for_subprocess
from tests.service.svc_support import bundles, free_port, wait_ready  # noqa: F401  (pytest fixtures)

ROOT = Path(__file__).resolve().parents[3]
STARTUP_S = 180.0  # a loaded CI machine can take long to import, load and warm up: poll, never a fixed sleep


class ServerProcess:
    """`python -m xtag serve BUNDLE` on a free port with extra XTAG_* settings; its log goes to a file."""

    def __init__(self, bundle: Path, log: Path, **settings: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XTAG_", "PROMETHEUS_MULTIPROC_DIR"))}
        env.update({"XTAG_LOG_LEVEL": "info", **{f"XTAG_{k.upper()}": v for k, v in settings.items()}})
        env["PYTHONPATH"] = pythonpath_for_subprocess(env.get("PYTHONPATH")) or ""  # the code under test
        command = [sys.executable, "-m", "xtag", "serve", str(bundle), "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(command, env=env, cwd=log.parent, stderr=log.open("w"))

    def wait_ready(self, timeout: float = STARTUP_S) -> ServerProcess:
        def alive() -> None:
            assert self.proc.poll() is None, f"server exited with {self.proc.returncode}: {self.tail()}"

        wait_ready(self.url, timeout, alive)
        return self

    def tail(self) -> str:
        return self.log.read_text()[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def check_413(status: int, content_type: str, raw: bytes, limit: int) -> None:
    assert status == 413, raw[:300]
    assert content_type == "application/problem+json"
    problem = json.loads(raw)
    assert problem["status"] == 413 and problem["type"] == "urn:xtag:problem:body-too-large"
    assert f"over the limit of {limit} bytes" in problem["detail"]


def test_oversized_body_gets_413_not_a_reset(bundles, tmp_path):
    """`requests` and `http.client` write the whole body before they read: the server must read and drop it
    rather than close on a half-read request, which such a client sees as a reset or a broken pipe."""
    limit = 4 * 2**20
    server = ServerProcess(bundles["a"], tmp_path / "serve.log", max_body_bytes=str(limit)).wait_ready()
    try:
        body = b'{"text": "' + b"x" * (3 * limit) + b'"}'  # 12 MiB: more than the socket buffers hold
        headers = {"Content-Type": "application/json"}
        for _ in range(2):  # each on a fresh connection
            r = requests.post(server.url + "/v1/predict", data=body, headers=headers, timeout=30)
            check_413(r.status_code, r.headers["content-type"], r.content, limit)
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("POST", "/v1/predict", body, headers)
            answer = conn.getresponse()
            check_413(answer.status, answer.getheader("content-type"), answer.read(), limit)
            conn.close()
        # chunked, no Content-Length: the 413 comes once the limit is passed, and the rest is drained too
        chunks = iter([body[i : i + 2**16] for i in range(0, len(body), 2**16)])
        r = requests.post(server.url + "/v1/predict", data=chunks, headers=headers, timeout=30)
        check_413(r.status_code, r.headers["content-type"], r.content, limit)
        ok = requests.post(server.url + "/v1/predict", json={"text": "python script"}, timeout=30)
        assert ok.status_code == 200
    finally:
        server.stop()


def test_413_comes_at_once_and_the_drain_is_bounded(bundles, tmp_path):
    """A client announcing 1 GiB and then stalling gets the 413 at once, and the connection closes after
    the drain's time bound (5 s) instead of being held open for as long as the client likes."""
    server = ServerProcess(bundles["a"], tmp_path / "serve.log", max_body_bytes="65536").wait_ready()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1073741824\r\n\r\n" + b"x" * 2**20
            )
            start = time.monotonic()
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 413"), head
            assert time.monotonic() - start < 3
            try:  # the rest of the response, then the close (EOF, or a reset for the unread remainder)
                while sock.recv(65536):
                    pass
            except ConnectionResetError:
                pass
            assert 3 < time.monotonic() - start < 20
    finally:
        server.stop()


def in_flight(url: str) -> float:
    """xtag_http_requests_in_flight, the scrape asking for it included."""
    text = httpx.get(url + "/metrics", timeout=5).text
    return next(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith("xtag_http_requests_in_flight")
    )


def test_sigterm_lets_the_request_in_flight_finish(bundles, tmp_path):
    """A genuinely slow request (a batch of 30,000 documents, seconds of work) is in flight when SIGTERM
    comes: it is answered in full, and then the process exits 0."""
    log = tmp_path / "serve.log"
    server = ServerProcess(
        bundles["a"],
        log,
        max_batch_documents="100000",
        max_body_bytes=str(64 * 2**20),
        graceful_shutdown_s="120",
        max_request_cost="0",  # the work and its answer are the point here: neither is bounded
        max_request_memory_mb="0",
        max_response_bytes="0",
    ).wait_ready()
    try:
        n = 30_000
        docs = [{"text": f"python script number {i} image network " * 10} for i in range(n)]
        answer: dict = {}

        def post() -> None:
            try:
                answer["response"] = requests.post(
                    server.url + "/v1/predict/batch", json={"documents": docs, "k": 5}, timeout=300
                )
            except requests.RequestException as exc:
                answer["error"] = exc

        client = threading.Thread(target=post)
        client.start()
        deadline = time.monotonic() + 60
        while in_flight(server.url) < 2:  # the batch and this scrape
            assert client.is_alive() and time.monotonic() < deadline, answer
            time.sleep(0.01)
        server.proc.send_signal(signal.SIGTERM)
        client.join(300)
        assert "error" not in answer, f"{answer['error']}\n{server.tail()}"
        r = answer["response"]
        assert r.status_code == 200, r.text[:500]
        assert len(r.json()["results"]) == n
        assert server.proc.wait(120) == 0, server.tail()
        assert "Waiting for connections to close" in log.read_text()  # the signal came while it was in flight
    finally:
        server.stop()
