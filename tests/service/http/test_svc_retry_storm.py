"""A client that retries at once after a 503 gets its refusal at once, but its retry is read only after
the Retry-After it was given: a retry storm cannot make the server spend itself on refusals (issue 30,
defect 6; figures in bench/service_load.py's storm phase)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import orjson
from xtag.config.settings import Settings

from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    PREDICT_S,
    LiveServer,
    bundles,
    post_head,
    read_response,
    slow_model,
)

BODY = orjson.dumps({"text": "python script"})


def occupy(server: LiveServer, started: list[float]) -> threading.Thread:
    """One prediction in flight for PREDICT_S (it takes the only slot); returns once its predict began."""
    before = len(started)
    thread = threading.Thread(
        target=lambda: httpx.post(server.url + "/v1/predict", json={"text": "python script"}, timeout=30)
    )
    thread.start()
    deadline = time.monotonic() + 10
    while len(started) == before and time.monotonic() < deadline:
        time.sleep(0.005)
    return thread


def test_an_immediate_retry_is_read_after_retry_after(bundles, slow_model):
    settings = Settings(_env_file=None, bundle=bundles["a"], max_queue=1, inline_max_texts=0)
    request = post_head("/v1/predict", len(BODY)) + BODY
    with LiveServer(settings) as server:
        started = slow_model()
        with socket.create_connection(("127.0.0.1", server.settings.server.port), timeout=10) as s:
            busy = occupy(server, started)
            start = time.monotonic()
            s.sendall(request)
            status, headers, _ = read_response(s, 10)
            refused_at = time.monotonic()
            assert status == 503 and headers["retry-after"] == "1"
            assert refused_at - start < PREDICT_S / 2  # the refusal itself comes at once

            s.sendall(request)  # a client that ignores Retry-After
            status, _, _ = read_response(s, 10)
            assert status == 200  # by then the slot was free again
            assert time.monotonic() - refused_at >= 0.9  # read only after Retry-After (1 s)
            busy.join()

            # a client that waits as asked finds its connection open and is not held further
            busy = occupy(server, started)
            s.sendall(request)
            assert read_response(s, 10)[0] == 503
            time.sleep(1.05)
            start = time.monotonic()
            s.sendall(request)
            assert read_response(s, 10)[0] == 200
            assert time.monotonic() - start < 0.5 + PREDICT_S
            busy.join()
