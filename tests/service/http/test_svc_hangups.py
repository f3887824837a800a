"""A client that hangs up after sending its body (issue 38, item 9): counted as 499 in the metrics and the access
log, and its work is dropped (queued) or stopped (running) instead of being done for nobody."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

import pytest
from xtag.config.settings import Settings
from xtag.models.inference.stopping import check
from xtag.service.batching import MicroBatcher
from xtag.service.http.hangups import ClientGone

from tests.service.http.test_svc_disconnects import requests_by_status
from tests.service.svc_support import LiveServer, bundles, post_head  # noqa: F401  (pytest fixtures)
from tests.service.test_svc_batching import Echo, executor, occupy  # noqa: F401  (a pytest fixture)


def client_leaves_when(event: asyncio.Event):
    """An ASGI `receive` whose client hangs up once `event` is set (never, if it stays clear)."""

    async def receive() -> dict:
        await event.wait()
        return {"type": "http.disconnect"}

    return receive


def test_a_queued_request_whose_client_hung_up_is_dropped_from_its_micro_batch(executor):
    echo = Echo()

    async def main():
        b = MicroBatcher(executor, max_wait_ms=0, max_documents=64)
        busy = await occupy(b, 0.2)  # the slot is taken: the next two requests queue
        gone, stays = asyncio.Event(), asyncio.Event()
        leaving = asyncio.ensure_future(b.submit("k", ["doc 1"], echo, client_leaves_when(gone)))
        staying = asyncio.ensure_future(b.submit("k", ["doc 2"], echo, client_leaves_when(stays)))
        await asyncio.sleep(0.02)
        gone.set()
        with pytest.raises(ClientGone):
            await leaving
        await busy
        return await staying

    kept = asyncio.run(main())
    assert echo.texts == [["doc 2"]] and int(kept.labels[0, 0]) == 2


@pytest.mark.parametrize("queued", [False, True], ids=["running-alone", "running-as-a-micro-batch"])
def test_a_running_call_whose_clients_all_hung_up_stops_at_its_next_check(executor, queued):
    """A call stops between two chunks (models/stopping.check) once every request it serves has lost its client,
    whether it started at once for one request or as a micro-batch of queued ones."""
    steps: list[int] = []

    def slow(texts):
        for i in range(100):
            check()
            steps.append(i)
            time.sleep(0.01)
        return Echo()(texts)

    async def main():
        b = MicroBatcher(executor, max_wait_ms=0, max_documents=64)
        busy = await occupy(b, 0.05) if queued else None
        gone = asyncio.Event()
        requests = [asyncio.ensure_future(b.submit("k", [f"doc {i}"], slow, client_leaves_when(gone))) for i in (1, 2)]
        if busy is not None:
            await busy
        while len(steps) < 5:  # the call is running
            await asyncio.sleep(0.01)
        gone.set()
        for r in requests:
            with pytest.raises(ClientGone):
                await r
        stopped_at = len(steps)
        await asyncio.sleep(0.2)
        return stopped_at

    stopped_at = asyncio.run(main())
    assert len(steps) <= stopped_at + 1 < 100


def test_a_client_that_hangs_up_mid_explain_counts_499_and_its_batch_stops_early(bundles, caplog):
    caplog.set_level(logging.INFO, logger="xtag.access")
    with LiveServer(Settings(_env_file=None, bundle=bundles["a"], access_log=True)) as server:
        explainer = server.app.state.registry.current.explainer
        label = explainer._label
        explained: list[int] = []

        def slow_label(*args):  # k = 1: one label, one call per document; 256 of them take 2.5 s or more
            explained.append(1)
            time.sleep(0.01)
            return label(*args)

        explainer._label = slow_label
        documents = [{"text": f"python script game doc{i}"} for i in range(256)]
        body = json.dumps({"documents": documents, "k": 1, "explain": True}).encode()
        with socket.create_connection(("127.0.0.1", server.settings.server.port), timeout=5) as s:
            s.sendall(post_head("/v1/predict/batch", len(body)) + body)
            deadline = time.monotonic() + 30
            while len(explained) < 10 and time.monotonic() < deadline:
                time.sleep(0.01)
        # the client has gone, with its body sent and its batch being explained
        deadline = time.monotonic() + 10
        while requests_by_status(server.url, "/v1/predict/batch").get("499", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        at_499 = len(explained)
        time.sleep(0.5)
        assert requests_by_status(server.url, "/v1/predict/batch") == {"499": 1}
        assert 10 <= len(explained) <= at_499 + 1 < 256  # at most the document being explained was finished
    lines = [r for r in caplog.records if r.name == "xtag.access" and r.path == "/v1/predict/batch"]
    assert [r.status for r in lines] == [499]
