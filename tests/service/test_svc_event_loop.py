"""Costly bodies do not stall the event loop: /health stays fast beside clients sending 2 MB batches
that take pydantic about a second to validate (issue 30, defect 5)."""

from __future__ import annotations

import statistics
import threading
import time

import httpx
import orjson
from pydantic import ValidationError
from xtag.service.schemas import BatchRequest, PredictRequest
from xtag.service.settings import Settings

from tests.service.svc_support import LiveServer, bundles, client, make_client  # noqa: F401  (pytest fixtures)

DOCUMENTS = orjson.dumps({"documents": [{"text": "a"}] * 150_000})  # 1.95 MB, under the 2 MiB body limit
EXTRA_FIELDS = orjson.dumps({"text": "a", **{f"f{i}": 0 for i in range(100_000)}})  # 100,000 unknown fields


def validation_seconds() -> float:
    """What validating the batch costs on this machine now (the time it held the event loop before)."""
    start = time.perf_counter()
    BatchRequest.model_validate(orjson.loads(DOCUMENTS))
    return time.perf_counter() - start


def test_health_stays_fast_beside_two_clients_sending_huge_batches(bundles):
    with LiveServer(Settings(_env_file=None, bundle=bundles["a"])) as server:
        stop = threading.Event()
        answers: list[httpx.Response] = []

        def hammer() -> None:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                while not stop.is_set():
                    answers.append(
                        client.post(
                            "/v1/predict/batch", content=DOCUMENTS, headers={"content-type": "application/json"}
                        )
                    )

        clients = [threading.Thread(target=hammer) for _ in range(2)]
        for t in clients:
            t.start()
        try:
            seconds = []
            with httpx.Client(base_url=server.url, timeout=30) as client:
                time.sleep(0.5)  # both clients are sending
                deadline = time.monotonic() + 4
                while time.monotonic() < deadline:
                    start = time.perf_counter()
                    assert client.get("/health").status_code == 200
                    seconds.append(time.perf_counter() - start)
                    time.sleep(0.02)
        finally:
            stop.set()
            for t in clients:
                t.join(60)
        reference = validation_seconds()
        # Validated on the loop, every /health waits for the batch being validated: half of `reference` on
        # average with two clients. 1/5 leaves room for a loaded machine and still tells the two apart.
        assert statistics.median(seconds) < max(reference / 5, 0.05), (statistics.median(seconds), reference)
        assert answers and {r.status_code for r in answers} == {422}
        detail = answers[0].json()["detail"]
        assert "150000 documents, the maximum per batch is 256" in detail


def test_a_body_with_countless_invalid_fields_gets_a_short_answer(client):
    try:
        PredictRequest.model_validate(orjson.loads(EXTRA_FIELDS))
    except ValidationError as exc:
        assert exc.error_count() == 100_000  # what pydantic reports
    r = client.post("/v1/predict", content=EXTRA_FIELDS, headers={"content-type": "application/json"})
    assert r.status_code == 422 and len(r.content) < 10_000
    problem = r.json()
    assert len(problem["errors"]) == 20 and problem["detail"].endswith("and 99980 more errors")
    assert problem["errors"][0]["loc"] == "body.f0"
