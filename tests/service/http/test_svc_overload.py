"""Admission control: past XTAG_MAX_QUEUE prediction requests in flight the server answers 503 + Retry-After
at once, instead of queueing every client (and its latency and memory) without bound."""

from __future__ import annotations

import asyncio
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families
from xtag.config.settings import Settings

from tests.service.svc_support import LiveServer, bundles, slow_model  # noqa: F401  (pytest fixtures)

STARTUP_S = 180.0  # poll with a generous deadline: a loaded machine can take long to load and warm up


def rejected_total(url: str) -> float:
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=5).text):
        for s in family.samples:
            if s.name == "xtag_overload_rejected_requests_total":
                return s.value
    raise AssertionError("no xtag_overload_rejected_requests_total in /metrics")


async def flood(url: str, n: int) -> tuple[list[tuple[httpx.Response, float]], list[int]]:
    """`n` prediction requests at once; meanwhile /health, /ready and /metrics, which must still answer."""
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def one(i: int) -> tuple[httpx.Response, float]:
            start = time.perf_counter()
            route = "/v1/predict" if i % 2 else "/predict"  # the unversioned alias is admitted the same way
            r = await client.post(route, json={"text": f"python script {i}"})
            return r, time.perf_counter() - start

        async def operations() -> list[int]:
            await asyncio.sleep(0.1)  # the flood is in
            return [(await client.get(path)).status_code for path in ("/health", "/ready", "/metrics")]

        *answers, ops = await asyncio.gather(*(one(i) for i in range(n)), operations())
        # the queue is empty again: a new request is admitted
        assert (await client.post("/v1/predict", json={"text": "python"})).status_code == 200
    return answers, ops


def test_flood_past_max_queue_gets_503_with_retry_after(bundles, slow_model):
    settings = Settings(_env_file=None, bundle=bundles["a"], max_queue=2, inline_max_texts=0)
    with LiveServer(settings) as server:
        slow_model()
        answers, ops = asyncio.run(flood(server.url, 20))
        assert ops == [200, 200, 200]  # operations endpoints are never turned away
        codes = [r.status_code for r, _ in answers]
        assert set(codes) <= {200, 503}, codes
        ok = [s for r, s in answers if r.status_code == 200]
        busy = [(r, s) for r, s in answers if r.status_code == 503]
        assert 2 <= len(ok) < 20 and busy, codes
        assert 503 in codes[0::2] and 503 in codes[1::2], codes  # /predict and /v1/predict share the bound
        for r, seconds in busy:
            assert int(r.headers["retry-after"]) >= 1
            assert r.headers["content-type"] == "application/problem+json"
            assert r.json()["type"] == "urn:xtag:problem:overloaded"
            assert "XTAG_MAX_QUEUE=2" in r.json()["detail"]
            assert seconds < min(ok)  # turned away at once, not after waiting for the predictor
        assert rejected_total(server.url) == len(busy)


def test_no_bound_with_max_queue_0(bundles, slow_model):
    settings = Settings(_env_file=None, bundle=bundles["a"], max_queue=0, inline_max_texts=0)
    with LiveServer(settings) as server:
        slow_model()
        answers, _ = asyncio.run(flood(server.url, 8))
        assert [r.status_code for r, _ in answers] == [200] * 8
        assert rejected_total(server.url) == 0
