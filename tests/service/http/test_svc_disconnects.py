"""A client that goes away mid-body is not a server error: one log line without a traceback, and the
metrics count it as status 499 (issue 30, defect 7)."""

from __future__ import annotations

import logging
import socket
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families
from xtag.config.settings import Settings

from tests.service.svc_support import LiveServer, bundles, post_head  # noqa: F401  (pytest fixtures)


def requests_by_status(url: str, endpoint: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=5).text):
        for s in family.samples:
            if s.name == "xtag_http_requests_total" and s.labels["endpoint"] == endpoint:
                out[s.labels["status"]] = out.get(s.labels["status"], 0) + s.value
    return out


def test_disconnects_mid_body_count_as_499_with_one_log_line_each(bundles, caplog):
    caplog.set_level(logging.INFO)
    with LiveServer(Settings(_env_file=None, bundle=bundles["a"])) as server:
        caplog.clear()
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", server.settings.server.port), timeout=5) as s:
                s.sendall(post_head("/v1/predict", 100) + b'{"text": "pyth')
                time.sleep(0.05)  # the server is reading the body
        deadline = time.monotonic() + 10
        while requests_by_status(server.url, "/v1/predict").get("499", 0) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert requests_by_status(server.url, "/v1/predict") == {"499": 5}
        records = [r for r in caplog.records if r.name.startswith(("xtag", "uvicorn"))]
        assert len(records) == 5, [r.getMessage() for r in records]
        for r in records:
            assert r.levelno <= logging.INFO and r.exc_info is None
            assert "closed the connection after 14 bytes of the body" in r.getMessage()
        assert httpx.get(server.url + "/v1/stats").json()["errors_5xx"] == 0
