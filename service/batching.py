"""Request micro-batching: concurrent requests with the same options share one predictor call.

Requests queue per key (model, k, beam, reweighting). A queue becomes a batch when it holds
`max_documents` texts, or when its oldest request has waited `max_wait_ms`, and it runs when one of
`max_running` predictor slots (worker threads) is free; beside a running call, only a full batch starts
(a partial one waits for the running call and grows meanwhile). With `max_wait_ms = 0` nothing ever waits
for company: an idle server runs a lone request at once, and requests that arrive while a batch is
running form the next batch, so batches grow exactly as fast as load does. That suits TF-IDF
XR-Linear, whose per-call overhead (featuriser, sparse setup) dwarfs its per-document cost.
Encoder bundles profit from a short wait (the registry's batch_wait_ms) so that concurrent requests
share one forward pass. The wait only applies while traffic is concurrent (the last batch held more
than one request): a lone client on an idle server never waits for company that is not coming, so
its latency stays the predictor's own (such a request skips the queue altogether).

Such a lone request, if it has at most `inline_max_texts` texts of at most `inline_max_chars` characters
in all, even runs on the event loop thread itself: handing it to a worker thread and its result back costs
two thread wake-ups, a measurable share of a TF-IDF bundle's latency (bench/RESULTS.md,
inline_vs_worker.py) and noise beside an encoder bundle's forward pass. "Lone" means that after
yielding once to the loop (so requests read in the same loop iteration have started) it is the only
HTTP request in flight, that the last second saw no concurrency (no batch of several requests, no
request queued or in flight beside another) and that it did see a lone request: a sequential client.
The first request after a quiet spell therefore still goes to a worker, since it may be the head of a
burst, and a burst that finds the loop blocked by it would be read late and batch differently. Under
concurrent load nothing is inlined: the loop keeps reading and queueing requests while the worker
predicts. While an inlined request runs the loop is blocked, which is also why its size is capped
(default: one text of at most 10,000 characters). Prediction time grows with the text, hardly with k or the
beam: on debtags, 0.17 ms for 1,000 characters, 0.7 ms for 10,000 and 12-13 ms for 100,000 (the
XTAG_MAX_TEXT_CHARS default) in-process, 26-45 ms in a loaded server, whatever k (595) and beam (512) (issue 38:
a /health poll waited up to 36 ms behind one inlined 100,000-character text). So a long text goes to a worker
like a concurrent one, and the loop is never held for more than about a millisecond.

Work handed to a thread is watched for the client's hang-up meanwhile (service/http/hangups.py): a queued request
whose client left is dropped from its micro-batch; a running call whose clients all left stops at its next
check (models/inference/stopping.py: between encoder batches).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from starlette.types import Receive
from xtag.models.inference.stopping import StopFlag
from xtag.models.inference.types import Predictions
from xtag.service.http.hangups import stopping, unless_hung_up

BatchFn = Callable[[list[str]], Predictions]
MEMORY_S = 1.0  # how far back concurrency (or a lone request) counts when deciding to inline


class PredictorPool(Executor):
    """The service's worker threads for predictor calls (one lane each), whose compiled engines split the cores.

    A call goes to the first idle lane, so a sequential client always runs on the same thread (and the same
    OpenMP team: each Python thread that starts parallel work gets a team of its own). A call that starts
    while n lanes are busy (itself included) gives its engine 1/n of the cores (models/engine/search.py
    share_cores): with several lanes (XTAG_INFERENCE_THREADS, or the family's parallel_calls) one call's
    TF-IDF, which holds the GIL, runs while another's engine, which releases it, scores, and two engines each
    as wide as the machine would put twice as many threads as cores. A call that starts alone keeps every
    core (bench/RESULTS.md, batch throughput against PECOS)."""

    def __init__(self, threads: int):
        self._lanes = [ThreadPoolExecutor(1, thread_name_prefix=f"xtag-predict-{i}") for i in range(threads)]
        self._busy = [0] * threads  # calls submitted to each lane and not finished
        self._shared_by = [1] * threads  # per lane: the n its engine's cores were last shared by (its thread only)
        self._lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        with self._lock:
            lane = min(range(len(self._lanes)), key=self._busy.__getitem__)  # ties: the first lane
            self._busy[lane] += 1
            calls = sum(1 for busy in self._busy if busy)
        future = self._lanes[lane].submit(self._call, lane, calls, fn, args, kwargs)
        future.add_done_callback(lambda _: self._finished(lane))
        return future

    def _call(self, lane: int, calls: int, fn, args, kwargs):
        if self._shared_by[lane] != calls:  # a lone call never imports the engine here
            from xtag.models.engine.search import share_cores

            share_cores(calls)
            self._shared_by[lane] = calls
        return fn(*args, **kwargs)

    def _finished(self, lane: int) -> None:
        with self._lock:
            self._busy[lane] -= 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        for lane in self._lanes:
            lane.shutdown(wait, cancel_futures=cancel_futures)


async def run_off_loop(
    executor: Executor | None,
    fn: Callable,
    texts: list[str],
    receive: Receive | None = None,
    stop: StopFlag | None = None,
):
    """Run `fn(texts)` in the executor's thread, or inline on the event loop when there is none. With the
    request's `receive`, a client hang-up meanwhile raises ClientGone; `fn` runs with `stop` as its thread's
    stop flag (models/inference/stopping.py), which is set by such a hang-up, or by the micro-batcher."""
    if executor is None:
        return fn(texts)
    call = (fn, texts) if stop is None else (stopping, fn, stop, texts)
    future = asyncio.get_running_loop().run_in_executor(executor, *call)
    return await unless_hung_up(future, receive, stop)


@dataclass
class _Pending:
    texts: list[str]
    run: BatchFn
    future: asyncio.Future
    since: float = field(default_factory=time.monotonic)


class MicroBatcher:
    """Per-key queues flushed into at most `max_running` concurrent predictor calls."""

    def __init__(
        self,
        executor: Executor | None,
        max_wait_ms: float = 0.0,
        max_documents: int = 64,
        max_running: int = 1,
        on_batch: Callable[[int], None] | None = None,
        alone: Callable[[], bool] | None = None,
        inline_max_texts: int = 0,
        inline_max_chars: int | None = None,  # None: no bound on the characters
    ):
        self.executor = executor
        self.alone, self.inline_max_texts = alone, inline_max_texts  # no `alone` test: never inline
        self.inline_max_chars = inline_max_chars
        self._concurrent_at = -float("inf")  # when concurrent traffic was last seen
        self._lone_at = -float("inf")  # when a request that ran alone last finished
        self.max_wait = max_wait_ms / 1000.0
        self.max_documents, self.max_running, self.on_batch = max_documents, max_running, on_batch
        self.running = 0
        self.last_batch_requests = 0  # > 1: traffic is concurrent, so waiting for company pays
        self._queues: dict[Hashable, list[_Pending]] = {}
        self._timer: asyncio.TimerHandle | None = None

    async def submit(
        self, key: Hashable, texts: list[str], run: BatchFn, receive: Receive | None = None
    ) -> Predictions:
        """Queue `texts`; `run` (any submission's, they are equivalent per key) predicts the whole batch.
        `receive`: the request's, to drop or stop its work when its client hangs up (service/http/hangups.py)."""
        if self._queues or not self._may_start(len(texts)):
            self._concurrent_at = time.monotonic()  # this request has to queue behind others
        elif self.wait == 0.0:
            if not self._may_inline(texts):
                return await self._run_now(texts, run, self.executor, receive)
            self.running += 1  # hold the slot while yielding: requests that arrive meanwhile queue
            try:
                await asyncio.sleep(0)
            finally:
                self.running -= 1
            if not self._queues and self.alone():  # no await from here into the run: nobody slips in
                return await self._run_now(texts, run, None)  # on the loop thread: no hand-off and back
            self._concurrent_at = time.monotonic()
            if not self._queues:  # another request is in flight but not queued: no company to wait for
                return await self._run_now(texts, run, self.executor, receive)
            # company arrived while this request yielded: it queues with them (the worker path)
        item = _Pending(texts, run, asyncio.get_running_loop().create_future())
        self._queues.setdefault(key, []).append(item)
        asyncio.get_running_loop().call_soon(self._schedule)  # after this iteration's other submissions
        return await unless_hung_up(item.future, receive)  # a hang-up cancels the future: dropped or stopped

    def _may_start(self, texts: int) -> bool:
        """Whether a call of `texts` texts may start now: on a free slot, and beside a running call only with a
        full batch. A partial one (single texts under concurrent load) waits and grows instead: one call of
        many texts costs less than two of fewer (bench/RESULTS.md: 32 clients of one text each served 7 %
        fewer requests per second with two calls at once), while full batches gain from running side by side
        (one's TF-IDF overlapping the other's scoring)."""
        return self.running == 0 or (self.running < self.max_running and texts >= self.max_documents)

    def _may_inline(self, texts: list[str]) -> bool:
        if self.alone is None or len(texts) > self.inline_max_texts:
            return False
        if self.inline_max_chars is not None and sum(map(len, texts)) > self.inline_max_chars:
            return False
        now = time.monotonic()
        if not self.alone():
            self._concurrent_at = now
            return False
        return now - self._concurrent_at >= MEMORY_S and now - self._lone_at < MEMORY_S

    async def _run_now(
        self, texts: list[str], run: BatchFn, executor: Executor | None, receive: Receive | None = None
    ) -> Predictions:
        """A free slot, nobody queued and no reason to wait: run at once, without queue, future or task
        (see bench/RESULTS.md for what they cost per request over HTTP), in `executor`'s thread or,
        with None, on the loop itself."""
        self.running += 1
        self.last_batch_requests = 1
        try:
            if self.on_batch:
                self.on_batch(len(texts))
            if executor is None:
                return run(texts)
            return await run_off_loop(executor, run, texts, receive, StopFlag())
        finally:
            self.running -= 1
            self._lone_at = time.monotonic()
            if self._queues:
                self._schedule()

    @property
    def wait(self) -> float:
        return self.max_wait if self.last_batch_requests > 1 else 0.0

    def _ready(self, now: float) -> Hashable | None:
        """The key to run next: a full queue, else the oldest queue whose wait is over (FIFO across keys)."""
        best, best_since = None, None
        for key, items in self._queues.items():
            full = sum(len(i.texts) for i in items) >= self.max_documents
            if full or now - items[0].since >= self.wait:
                since = -1.0 if full else items[0].since
                if best_since is None or since < best_since:
                    best, best_since = key, since
        return best

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        while self.running < self.max_running and self._queues:
            key = self._ready(now)
            if key is None:  # everyone is still waiting for company: wake up at the first deadline
                first = min(items[0].since for items in self._queues.values())
                self._timer = loop.call_later(max(first + self.wait - now, 0.0), self._schedule)
                return
            if not self._may_start(sum(len(i.texts) for i in self._queues[key])):
                return  # _ready prefers full queues, so none is full: wait for the running call, which reschedules
            items, size = self._take(key)
            self.last_batch_requests = len(items)
            if len(items) > 1:
                self._concurrent_at = now
            self.running += 1
            loop.create_task(self._run(items, size))

    def _take(self, key: Hashable) -> tuple[list[_Pending], int]:
        queue = self._queues[key]
        taken, size = [], 0
        while queue and (not taken or size + len(queue[0].texts) <= self.max_documents):
            item = queue.pop(0)
            taken.append(item)
            size += len(item.texts)
        if not queue:
            del self._queues[key]
        return taken, size

    async def _run(self, items: list[_Pending], size: int) -> None:
        try:
            live = [i for i in items if not i.future.done()]  # a cancelled request is dropped
            if not live:
                return
            texts = [t for item in live for t in item.texts]
            if self.on_batch:
                self.on_batch(len(texts))
            stop = StopFlag()  # set once every member's client has hung up (their futures cancelled)
            for item in live:
                item.future.add_done_callback(lambda _: live_cancelled(live) and stop.set())
            try:
                preds = await run_off_loop(self.executor, live[0].run, texts, stop=stop)
            except Exception as exc:  # every waiter gets the error, none hangs
                for item in live:
                    if not item.future.done():
                        item.future.set_exception(exc)
                return
            lo = 0
            for item in live:
                hi = lo + len(item.texts)
                if not item.future.done():
                    item.future.set_result(
                        Predictions(
                            labels=np.ascontiguousarray(preds.labels[lo:hi]),
                            scores=np.ascontiguousarray(preds.scores[lo:hi]),
                        )
                    )
                lo = hi
        finally:
            self.running -= 1
            self._schedule()


def live_cancelled(items: list[_Pending]) -> bool:
    return all(item.future.cancelled() for item in items)
