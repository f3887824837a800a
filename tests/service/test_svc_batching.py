"""Micro-batching: concurrent requests share predictor calls, each gets its own rows, in order, errors reach all."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from models.inference import Predictions
from service.app import create_app
from service.batching import MicroBatcher
from service.settings import Settings
from svc_support import bundles, client, make_client  # noqa: F401  (pytest fixtures)


class Echo:
    """Predicts 'label id = hash of the text' so every row can be checked; records batch sizes."""

    def __init__(self, delay: float = 0.0):
        self.calls: list[int] = []
        self.texts: list[list[str]] = []
        self.delay = delay
        self.lock = threading.Lock()

    def __call__(self, texts: list[str]) -> Predictions:
        with self.lock:
            self.calls.append(len(texts))
            self.texts.append(list(texts))
        time.sleep(self.delay)
        ids = np.array([[int(t.split()[-1])] for t in texts], dtype=np.int64)
        return Predictions(ids, ids.astype(np.float32))


@pytest.fixture
def executor():
    ex = ThreadPoolExecutor(2)
    yield ex
    ex.shutdown()


def run(coro):
    return asyncio.run(coro)


async def occupy(b: MicroBatcher, seconds: float = 0.05) -> asyncio.Future:
    """Start a slow lone request (it runs at once) and return it: requests submitted now have to queue."""
    first = asyncio.ensure_future(b.submit("busy", ["doc -1"], Echo(delay=seconds)))
    await asyncio.sleep(0.01)
    return first


def test_concurrent_requests_share_one_call_and_get_their_own_rows(executor):
    echo = Echo()

    async def main():
        b = MicroBatcher(executor, max_wait_ms=20, max_documents=100)
        first = await occupy(b)
        subs = [b.submit("k", [f"doc {i}", f"doc {i + 100}"], echo) for i in range(10)]
        results = await asyncio.gather(*subs)
        await first
        return results

    results = run(main())
    assert echo.calls == [20]
    for i, p in enumerate(results):
        assert p.labels[:, 0].tolist() == [i, i + 100]


def test_different_keys_never_share_a_call(executor):
    echo = Echo()

    async def main():
        b = MicroBatcher(executor, max_wait_ms=20, max_documents=100)
        first = await occupy(b)
        results = await asyncio.gather(*(b.submit(i % 2, [f"doc {i}"], echo) for i in range(6)))
        await first
        return results

    results = run(main())
    assert sorted(echo.calls) == [3, 3]
    assert all(len({int(t.split()[-1]) % 2 for t in call}) == 1 for call in echo.texts)
    assert [int(p.labels[0, 0]) for p in results] == list(range(6))


def test_max_documents_caps_a_batch(executor):
    echo = Echo()

    async def main():
        b = MicroBatcher(executor, max_wait_ms=50, max_documents=4, max_running=2)
        return await asyncio.gather(*(b.submit("k", [f"doc {i}"], echo) for i in range(10)))

    results = run(main())
    assert max(echo.calls) <= 4 and sum(echo.calls) == 10
    assert [int(p.labels[0, 0]) for p in results] == list(range(10))


def test_a_lone_request_does_not_wait_when_max_wait_is_zero(executor):
    echo = Echo()

    async def main():
        b = MicroBatcher(executor, max_wait_ms=0, max_documents=64)
        start = time.perf_counter()
        await b.submit("k", ["doc 1"], echo)
        return time.perf_counter() - start

    assert run(main()) < 0.05 and echo.calls == [1]


def test_a_lone_request_on_an_idle_server_does_not_wait_for_company(executor):
    """Encoder bundles wait up to max_wait for concurrent requests, but only while traffic is concurrent:
    a single client's requests run at once; after a batch that had company, the wait applies again."""
    echo = Echo()

    async def timed(b, text):
        start = time.perf_counter()
        await b.submit("k", [text], echo)
        return time.perf_counter() - start

    async def main():
        b = MicroBatcher(executor, max_wait_ms=300, max_documents=64)
        alone = [await timed(b, f"doc {i}") for i in range(3)]
        first = await occupy(b)
        await asyncio.gather(*(b.submit("k", [f"doc {i}"], echo) for i in (3, 4)))  # queued together: company
        await first
        after_burst = await timed(b, "doc 5")  # concurrency was just seen: waits for company
        return alone, after_burst

    alone, after_burst = run(main())
    assert max(alone) < 0.1
    assert after_burst >= 0.25
    assert echo.calls == [1, 1, 1, 2, 1]


def test_requests_arriving_during_a_running_batch_form_the_next_batch(executor):
    echo = Echo(delay=0.05)

    async def main():
        b = MicroBatcher(executor, max_wait_ms=0, max_documents=64, max_running=1)
        first = asyncio.ensure_future(b.submit("k", ["doc 0"], echo))
        await asyncio.sleep(0.01)  # the first call is now running
        rest = [b.submit("k", [f"doc {i}"], echo) for i in range(1, 8)]
        return await asyncio.gather(first, *rest)

    results = run(main())
    assert echo.calls == [1, 7]
    assert [int(p.labels[0, 0]) for p in results] == list(range(8))


def test_an_error_reaches_every_waiter_and_the_batcher_recovers(executor):
    def boom(texts):
        raise ValueError("predictor broke")

    async def main():
        b = MicroBatcher(executor, max_wait_ms=10)
        out = await asyncio.gather(*(b.submit("k", ["doc 1"], boom) for _ in range(3)), return_exceptions=True)
        ok = await b.submit("k", ["doc 5"], Echo())
        return out, ok, b.running

    out, ok, running = run(main())
    assert all(isinstance(e, ValueError) for e in out)
    assert int(ok.labels[0, 0]) == 5 and running == 0


def test_the_service_batches_concurrent_http_requests(bundles):
    """Through the app: 16 concurrent /v1/predict calls with a 30 ms window share few predictor calls, answers unchanged."""
    app = create_app(Settings(_env_file=None, bundle=bundles["a"], batching=True, batch_max_wait_ms=30,
                              load_in_background=False))

    async def main():
        await app.state.registry.load()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            texts = [f"python script game {i}" if i % 2 else "sql database tool" for i in range(16)]
            rs = await asyncio.gather(*(c.post("/v1/predict", json={"text": t, "k": 3}) for t in texts))
            solo = [(await c.post("/v1/predict", json={"text": t, "k": 3})).json()["labels"] for t in texts]
            metrics = (await c.get("/metrics")).text
        return rs, solo, metrics

    rs, solo, metrics = asyncio.run(main())
    assert [r.status_code for r in rs] == [200] * 16
    assert [r.json()["labels"] for r in rs] == solo
    count = next(float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("xtag_predict_batch_documents_count"))
    total = next(float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("xtag_predict_batch_documents_sum"))
    # warm-up does not go through the batcher; 16 concurrent + 16 sequential requests = 32 documents
    assert total == 32 and count <= 16 + 3


@pytest.mark.parametrize("overrides", [{"batching": False}, {"inference_threads": 0},
                                       {"batching": False, "inference_threads": 0}])
def test_every_execution_mode_gives_the_same_answers(make_client, client, overrides):
    """Batching off, predictions on the event loop itself, or both: same labels as the default (batched, threaded)."""
    other = make_client(**overrides)
    for text in ("python script game", "quasar telescope image tool", "sql database"):
        body = {"text": text, "k": 4, "reweight": {"scheme": "psp", "alpha": 0.5}}
        assert other.post("/v1/predict", json=body).json()["labels"] == client.post("/v1/predict", json=body).json()["labels"]
    docs = {"documents": [{"text": "python"}, {"text": "audio music"}], "k": 2}
    assert other.post("/v1/predict/batch", json=docs).json()["results"] == \
        client.post("/v1/predict/batch", json=docs).json()["results"]
