"""The drain on shutdown (SIGTERM, or a worker retired by a SIGHUP roll) loses no request (issue 38, item 3):
an idle keep-alive connection still gets the request a client sends on it during XTAG_DRAIN_GRACE_S, with
`Connection: close`, and is closed only once idle throughout; a response in flight says `Connection: close`.
Both of uvicorn's HTTP implementations (httptools, and the h11 fallback) are checked."""

from __future__ import annotations

import json
import socket
import time
from contextlib import ExitStack

import pytest
from xtag.config.settings import Settings

from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    LiveServer,
    bundles,
    post_head,
    read_response,
    slow_model,
)

GRACE_S = 1.0
MARGIN_S = 1.0  # what the checks allow past the grace on a loaded 2-core machine


@pytest.fixture(params=["httptools", "h11"])
def protocol(request, monkeypatch) -> str:
    if request.param == "h11":
        from xtag.service import server as server_module

        monkeypatch.setattr(server_module, "_fastest", lambda module, fallback, name: fallback)
    return request.param


def serve(bundles, protocol: str) -> LiveServer:
    server = LiveServer(Settings(_env_file=None, bundle=bundles["a"], drain_grace_s=GRACE_S))
    assert server.server.config.http.endswith("H11Guard" if protocol == "h11" else "HttpToolsGuard")
    return server


def connect(server: LiveServer, stack: ExitStack) -> socket.socket:
    return stack.enter_context(socket.create_connection(("127.0.0.1", server.settings.server.port), timeout=10))


def get_health(sock: socket.socket) -> tuple[int, dict, bytes]:
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return read_response(sock, 10)


def begin_shutdown(server: LiveServer) -> float:
    """What SIGTERM does (uvicorn's handler sets should_exit); returns once the listener is closed."""
    server.server.should_exit = True
    start = time.monotonic()
    while time.monotonic() - start < 5:
        try:
            socket.create_connection(("127.0.0.1", server.settings.server.port), timeout=1).close()
        except OSError:
            return start
        time.sleep(0.01)
    raise AssertionError("the server kept accepting connections after shutdown began")


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_an_idle_connection_still_gets_its_next_request_answered_during_the_drain(bundles, protocol):
    with serve(bundles, protocol) as server, ExitStack() as stack:
        busy, silent = connect(server, stack), connect(server, stack)
        for sock in (busy, silent):
            status, headers, _ = get_health(sock)
            assert status == 200 and headers.get("connection") != "close"  # kept alive, now idle
        start = begin_shutdown(server)
        status, headers, body = get_health(busy)  # sent on an idle connection after the drain began
        assert status == 200 and json.loads(body)["status"] == "ok"
        assert headers["connection"] == "close"
        assert closed_by_server(busy, 5)
        # a connection idle throughout is closed after the grace, not at once
        assert not closed_by_server(silent, max(GRACE_S - (time.monotonic() - start) - 0.3, 0.01))
        assert closed_by_server(silent, GRACE_S + MARGIN_S)
        server.thread.join(GRACE_S + 5)
        assert not server.thread.is_alive()


def test_a_response_in_flight_when_the_drain_begins_says_connection_close(bundles, protocol, slow_model):
    started = slow_model()
    with serve(bundles, protocol) as server, ExitStack() as stack:
        sock = connect(server, stack)
        body = json.dumps({"text": "python image tool", "k": 3}).encode()
        sock.sendall(post_head("/v1/predict", len(body)) + body)
        deadline = time.monotonic() + 10
        while not started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert started, "the prediction never started"
        begin_shutdown(server)
        status, headers, answer = read_response(sock, 10)
        assert status == 200 and json.loads(answer)["labels"], answer[:300]
        assert headers["connection"] == "close"
        assert closed_by_server(sock, 5)
