"""Errors the app used not to shape are problem+json too (uvicorn's 400, the graceful-shutdown cut, CORS
refusals, 500s with nosniff); HEAD probes get 200; an integral float is an integer (issue 30, defect 12)."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
from fastapi.testclient import TestClient
from xtag.config.settings import Settings
from xtag.service.app import create_app
from xtag.service.state.model_slot import ServedModel

from tests.service.svc_support import LiveServer, bundles, client, make_client, read_response  # noqa: F401


def check_problem(status: int, headers, body: bytes, expected: int) -> dict:
    assert status == expected, body[:300]
    assert headers["content-type"] == "application/problem+json"
    assert headers["x-content-type-options"] == "nosniff"
    problem = json.loads(body)
    assert problem["status"] == expected
    return problem


def test_malformed_http_gets_a_problem(bundles):
    with LiveServer(Settings(_env_file=None, bundle=bundles["a"])) as server:
        with socket.create_connection(("127.0.0.1", server.settings.server.port), timeout=5) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n")
            problem = check_problem(*read_response(s, 5), 400)
            assert problem["type"] == "urn:xtag:problem:bad-request"


def test_a_request_cut_by_the_graceful_shutdown_limit_gets_a_503_problem(bundles, monkeypatch):
    settings = Settings(_env_file=None, bundle=bundles["a"], graceful_shutdown_s=0.5, inline_max_texts=0)
    with LiveServer(settings) as server:
        monkeypatch.setattr(ServedModel, "predict", lambda *a, **k: time.sleep(5))
        answers = []
        request = threading.Thread(
            target=lambda: answers.append(httpx.post(server.url + "/v1/predict", json={"text": "x"}, timeout=30))
        )
        request.start()
        while server.app.state.recent.in_flight < 1:
            time.sleep(0.005)
        server.server.should_exit = True  # as SIGTERM does
        request.join(30)
    r = answers[0]
    problem = check_problem(r.status_code, r.headers, r.content, 503)
    assert problem["type"] == "urn:xtag:problem:shutting-down" and "XTAG_GRACEFUL_SHUTDOWN_S" in problem["detail"]
    assert r.headers["retry-after"] == "1"


def test_cors_refusals_are_problems(make_client):
    c = make_client(cors_origins="https://app.example")
    r = c.options("/v1/predict", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    problem = check_problem(r.status_code, r.headers, r.content, 400)
    assert problem["type"] == "urn:xtag:problem:cors-refused" and "origin" in problem["detail"]
    assert "access-control-allow-origin" not in r.headers


def test_an_unexpected_error_is_a_500_problem_with_nosniff(bundles, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    with TestClient(create_app(Settings(_env_file=None, bundle=bundles["a"])), raise_server_exceptions=False) as c:
        while c.get("/ready").status_code != 200:
            time.sleep(0.02)
        monkeypatch.setattr(ServedModel, "predict", broken)
        r = c.post("/v1/predict", json={"text": "python"})
        problem = check_problem(r.status_code, r.headers, r.content, 500)
        assert "RuntimeError" in problem["detail"]
        metrics = c.get("/metrics").text
        assert (
            'xtag_http_requests_total{endpoint="/v1/predict",method="POST",model="tiny-a",status="500",version="1"} 1.0'
            in metrics
        )


def test_head_probes_get_200(client):
    for path in ("/health", "/"):
        r = client.head(path)
        assert r.status_code == 200 and r.content == b""


def test_an_integral_float_is_an_integer(client):
    r = client.post("/v1/predict", json={"text": "python script", "k": 3.0, "beam_size": 8.0})
    assert r.status_code == 200 and len(r.json()["labels"]) == 3
    r = client.post("/v1/predict/batch", json={"documents": [{"id": 7, "text": "sql"}], "k": 2.0})
    assert r.status_code == 200 and r.json()["results"][0]["id"] == "7"
    # but not an id: 7.0 and 1e3 are not ids "7" and "1000" (issue 38: floats made different ids collide)
    r = client.post("/v1/predict/batch", json={"documents": [{"id": 7.0, "text": "sql"}]})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == "body.documents[0].id"
    for bad in (3.5, "3", True):
        r = client.post("/v1/predict", json={"text": "python", "k": bad})
        assert r.status_code == 422 and r.json()["errors"][0]["loc"] == "body.k"
