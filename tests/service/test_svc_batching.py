"""Micro-batching: concurrent requests share predictor calls, each gets its own rows, in order, errors reach all."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numba
import numpy as np
import pytest
import xtag.service.app as app_module
from xtag.config.settings import Settings
from xtag.models.inference.types import Predictions
from xtag.service.app import create_app, predictor_calls
from xtag.service.batching import MicroBatcher, PredictorPool

from tests.service.svc_support import bundles, client, make_client  # noqa: F401  (pytest fixtures)


class Echo:
    """Predicts 'label id = hash of the text' so every row can be checked; records batch sizes."""

    def __init__(self, delay: float = 0.0):
        self.calls: list[int] = []
        self.texts: list[list[str]] = []
        self.threads: list[int] = []
        self.delay = delay
        self.lock = threading.Lock()

    def __call__(self, texts: list[str]) -> Predictions:
        with self.lock:
            self.calls.append(len(texts))
            self.texts.append(list(texts))
            self.threads.append(threading.get_ident())
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
    app = create_app(
        Settings(_env_file=None, bundle=bundles["a"], batching=True, batch_max_wait_ms=30, load_in_background=False)
    )

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
    count = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("xtag_predict_batch_documents_count")
    )
    total = next(
        float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("xtag_predict_batch_documents_sum")
    )
    # warm-up does not go through the batcher; 16 concurrent + 16 sequential requests = 32 documents
    assert total == 32 and count <= 16 + 3


@pytest.mark.parametrize(
    "overrides", [{"batching": False}, {"inference_threads": 0}, {"batching": False, "inference_threads": 0}]
)
def test_every_execution_mode_gives_the_same_answers(make_client, client, overrides):
    """Batching off, predictions on the event loop itself, or both: same labels as the default (batched, threaded)."""
    other = make_client(**overrides)
    for text in ("python script game", "quasar telescope image tool", "sql database"):
        body = {"text": text, "k": 4, "reweight": {"scheme": "psp", "alpha": 0.5}}
        assert (
            other.post("/v1/predict", json=body).json()["labels"]
            == client.post("/v1/predict", json=body).json()["labels"]
        )
    docs = {"documents": [{"text": "python"}, {"text": "audio music"}], "k": 2}
    assert (
        other.post("/v1/predict/batch", json=docs).json()["results"]
        == client.post("/v1/predict/batch", json=docs).json()["results"]
    )


def test_a_sequential_clients_small_requests_run_on_the_loop_and_anything_else_in_a_worker(executor):
    """With inlining on (the service's default: one text), a request alone on the server that follows a lone
    request skips the hand-off to a worker thread; the first one (it may head a burst), a bigger one, or one
    with another request in flight goes to the worker."""
    echo = Echo()
    in_flight = {"n": 1}

    async def main():
        b = MicroBatcher(executor, max_wait_ms=0, alone=lambda: in_flight["n"] <= 1, inline_max_texts=1)
        for text in (["doc 1"], ["doc 2"], ["doc 3", "doc 4"], ["doc 5"]):
            await b.submit("k", text, echo)
        in_flight["n"] = 2  # e.g. a request still reading its body
        await b.submit("k", ["doc 6"], echo)
        return threading.get_ident(), b.running

    loop_thread, running = run(main())
    assert echo.calls == [1, 1, 2, 1, 1] and running == 0
    assert [t == loop_thread for t in echo.threads] == [False, True, False, True, False]


def test_requests_that_arrive_together_still_share_a_worker_call_with_inlining_on(executor):
    """Submissions made in the same loop iteration find each other (the lone check yields once first):
    none runs alone on the loop, they share one predictor call."""
    echo = Echo()

    async def main():
        b = MicroBatcher(executor, max_wait_ms=0, alone=lambda: True, inline_max_texts=1)
        await b.submit("k", ["doc 9"], echo)  # a lone request first, so that the next one may be inlined
        return threading.get_ident(), await asyncio.gather(*(b.submit("k", [f"doc {i}"], echo) for i in range(5)))

    loop_thread, results = run(main())
    assert echo.calls == [1, 5] and echo.threads[1] != loop_thread
    assert [int(p.labels[0, 0]) for p in results] == list(range(5))


def test_no_inlining_for_a_while_after_concurrent_traffic(executor, monkeypatch):
    """Under concurrent load the loop must keep reading requests while the worker predicts, so a request
    that happens to be alone right after a shared batch still goes to the worker; once traffic has been
    quiet for MEMORY_S, a sequential client's requests are inlined again (from its second one)."""
    import xtag.service.batching as batching

    monkeypatch.setattr(batching, "MEMORY_S", 0.2)
    echo = Echo()

    async def main():
        b = MicroBatcher(executor, max_wait_ms=0, alone=lambda: True, inline_max_texts=1)
        await asyncio.gather(*(b.submit("k", [f"doc {i}"], echo) for i in range(3)))  # 1 at once, 2 queued
        await b.submit("k", ["doc 3"], echo)  # alone, but right after a shared batch
        await asyncio.sleep(0.25)
        for i in (4, 5):
            await b.submit("k", [f"doc {i}"], echo)
        return threading.get_ident()

    loop_thread = run(main())
    assert echo.calls == [1, 2, 1, 1, 1]
    assert [t == loop_thread for t in echo.threads] == [False, False, False, False, True]


def test_an_inlined_request_that_fails_frees_its_slot(executor):
    def boom(texts):
        raise ValueError("predictor broke")

    async def main():
        b = MicroBatcher(executor, max_wait_ms=0, alone=lambda: True, inline_max_texts=1)
        await b.submit("k", ["doc 1"], Echo())
        with pytest.raises(ValueError):
            await b.submit("k", ["doc 2"], boom)
        ok = await b.submit("k", ["doc 7"], Echo())
        return ok, b.running

    ok, running = run(main())
    assert int(ok.labels[0, 0]) == 7 and running == 0


def test_the_service_runs_a_lone_request_on_its_event_loop(bundles):
    """Default settings: a sequential client's /v1/predict is predicted on the event-loop thread from its second
    request on, not in the xtag-predict worker; XTAG_INLINE_MAX_TEXTS=0 sends every request to the worker."""

    def thread_of_prediction(**settings) -> str:
        app = create_app(Settings(_env_file=None, bundle=bundles["a"], load_in_background=False, **settings))
        seen = []

        async def main():
            await app.state.registry.load()
            model = app.state.registry.current
            predict = model.predict

            def recording(*args, **kwargs):
                seen.append(threading.current_thread().name)
                return predict(*args, **kwargs)

            model.predict = recording
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                for _ in range(2):
                    r = await c.post("/v1/predict", json={"text": "python script game", "k": 3})
                    assert r.status_code == 200 and r.json()["labels"]

        asyncio.run(main())
        return seen

    first, second = thread_of_prediction()
    assert first.startswith("xtag-predict") and not second.startswith("xtag-predict")
    assert all(name.startswith("xtag-predict") for name in thread_of_prediction(inline_max_texts=0))


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs numba threads on 2 cores or more")
def test_concurrent_predictor_calls_split_the_engines_cores_and_a_lone_call_keeps_them():
    """Two worker threads predicting at once each give the engine half the cores (no oversubscription); a call
    that runs alone afterwards gets every core back."""
    seen: list[tuple[str, int]] = []

    def engine_threads(tag: str, delay: float):
        def fn(texts: list[str]) -> Predictions:
            time.sleep(delay)
            seen.append((tag, numba.get_num_threads()))  # numba's count for this worker thread
            return Echo()(texts)

        return fn

    async def main():
        b = MicroBatcher(pool, max_wait_ms=0, max_documents=1, max_running=2)  # one text is a full batch
        first = asyncio.ensure_future(b.submit("a", ["doc 1"], engine_threads("first", 0.2)))
        await asyncio.sleep(0.05)
        await b.submit("b", ["doc 2"], engine_threads("second", 0.0))
        await first
        await b.submit("c", ["doc 3"], engine_threads("alone", 0.0))

    pool = PredictorPool(2)
    try:
        run(main())
    finally:
        pool.shutdown()
    full = numba.config.NUMBA_NUM_THREADS
    assert dict(seen) == {"first": full, "second": full // 2, "alone": full}


def test_tfidf_bundles_run_two_predictor_calls_at_once_by_default_and_encoder_bundles_one(monkeypatch):
    """XR-Linear overlaps one call's featurising with another's scoring; an encoder bundle's ONNX session uses
    every core per call. Never more calls than cores, and XTAG_INFERENCE_THREADS overrides both."""
    monkeypatch.delenv("XTAG_INFERENCE_THREADS", raising=False)
    monkeypatch.setattr(app_module, "thread_count", lambda: 4)  # the CPUs this process may use (models/threads.py)
    default = Settings(_env_file=None)
    assert (predictor_calls(default, "xlinear"), predictor_calls(default, "xr-transformer")) == (2, 1)
    assert predictor_calls(default) == 2  # the worker pool, sized before a bundle is loaded
    assert predictor_calls(Settings(_env_file=None, inference_threads=3), "xr-transformer") == 3
    monkeypatch.setattr(app_module, "thread_count", lambda: 1)
    assert predictor_calls(default, "xlinear") == 1


def test_beside_a_running_call_only_a_full_batch_starts_and_a_partial_one_waits_and_grows(executor):
    """With two slots, single texts under load still share one call (they wait for the running one), while a
    request of a full batch's texts runs beside it."""
    echo = Echo()

    async def main():
        b = MicroBatcher(executor, max_wait_ms=0, max_documents=4, max_running=2)
        first = await occupy(b, seconds=0.2)
        full = asyncio.ensure_future(b.submit("k", [f"doc {i}" for i in range(4)], echo))
        await asyncio.sleep(0.05)
        started_beside = list(echo.calls)  # the full batch ran while the first call was still busy
        singles = [b.submit("s", [f"doc {i}"], echo) for i in (10, 11, 12)]
        await asyncio.gather(full, first, *singles)
        return started_beside

    started_beside = run(main())
    assert started_beside == [4]
    assert echo.calls == [4, 3]  # the three single texts waited for the running call, then ran together
