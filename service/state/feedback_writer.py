"""The feedback store's one writer thread, and the writes waiting for it (group commit), for POST /v1/feedback and
Annif's learn (service/routes/feedback.py); made on first use (service/deps.py feedback_writer)."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from xtag.service.http.problems import Problem
from xtag.service.state.feedback_store import Feedback, FeedbackStore, Written

log = logging.getLogger("xtag.service")


class FeedbackWriter:
    """The store, its one writer thread, and the writes waiting for it (group commit).

    A write queues its documents and asks the writer thread to commit; the thread takes every write queued
    by then and commits them in one transaction, answering each with its own counts. While one transaction
    runs, the next group gathers, so under load each sync to disk carries every write that arrived meanwhile
    (one transaction per write answered 503 to 814 of 1,000 documents from 20 clients, issue 38). Writes not
    yet answered are counted, and past XTAG_FEEDBACK_MAX_PENDING refused at once: a slow or stuck store cannot
    pile up work. A failed transaction fails every write of its group (503; nothing of it was stored, so a
    retry is safe)."""

    def __init__(self, target: str, timeout_s: float, max_pending: int):
        self.store = FeedbackStore(target, timeout_s)
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="xtag-feedback")
        self.queue: deque[tuple[list[Feedback], Future]] = deque()
        self.pending = 0

    async def write(self, items: list[Feedback]) -> Written:
        if self.pending >= self.max_pending:
            detail = (
                f"the feedback store is busy: {self.pending} writes wait for it, the limit is {self.max_pending} "
                "(XTAG_FEEDBACK_MAX_PENDING); retry later"
            )
            raise Problem(503, "feedback-unavailable", detail, headers={"Retry-After": "5"})
        self.pending += 1
        answer: Future = Future()
        self.queue.append((items, answer))
        self.executor.submit(self._commit_queued)
        waiter = asyncio.wrap_future(answer)
        waiter.add_done_callback(lambda _: self._done())
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
        except TimeoutError:
            log.error("feedback write to %s took over %.1f s", self.store.where, self.timeout_s)
            detail = f"the feedback store did not answer within {self.timeout_s:g} s (XTAG_FEEDBACK_TIMEOUT_S)"
        except Exception as exc:  # sqlite3/psycopg errors, a missing driver: the store's problem, not the client's
            detail = f"the feedback store ({self.store.where}) failed: {type(exc).__name__}"
        raise Problem(503, "feedback-unavailable", detail, headers={"Retry-After": "5"})

    def _commit_queued(self) -> None:
        """On the writer thread: every write queued now, in one transaction (none left: an earlier call took them)."""
        group = []
        while self.queue:  # only this thread takes from the queue
            group.append(self.queue.popleft())
        if not group:
            return
        try:
            written = self.store.add([items for items, _ in group])
        except Exception as exc:
            log.error("feedback write of %d requests to %s failed: %s", len(group), self.store.where, exc)
            for _, answer in group:
                answer.set_exception(exc)
            return
        log.debug(
            "feedback: %d writes, %d documents committed in one transaction",
            len(group),
            sum(len(items) for items, _ in group),
        )
        for (_, answer), counts in zip(group, written):
            answer.set_result(counts)

    def _done(self) -> None:
        self.pending -= 1

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.store.close()
