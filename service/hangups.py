"""A client that hangs up while its request is being worked on: its work is dropped or stopped, and it counts as 499.

Once a request's body is whole, the next ASGI `receive` returns `http.disconnect` when the client goes away
(or when the answer is complete). Nobody called it while a handler waited for a worker thread, so a client that
left was noticed only when its answer could not be sent, and counted as 200: issue 38 saw a 256-document explain
batch run to its end after its client had gone. Here a request that hands work to a thread listens for the
hang-up meanwhile (one task per hand-off, only on that path: an inlined request never waits). On a hang-up the
work's future is cancelled, which drops work that has not started (a queued micro-batch member, a call still in
the pool's queue), and its StopFlag is set, which the worker thread checks between chunks (`in_chunks`, and
ServedModel.explained between documents); the handler raises ClientGone, answered (to nobody) as 499.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import numpy as np
from starlette.types import Receive
from xtag.models.beam_search import Predictions


class ClientGone(Exception):
    """The client hung up before its answer: there is nobody left to answer (problems.py: status 499, unsent)."""


class Stopped(Exception):
    """Raised in a worker thread at a chunk boundary once its StopFlag is set: nobody waits for the result."""


class StopFlag(threading.Event):
    """Set on the event loop when no client waits for a call's result any more; read by the worker thread."""

    def check(self) -> None:
        if self.is_set():
            raise Stopped()


async def hung_up(receive: Receive) -> None:
    """Returns once the client has disconnected; call it only after the request body has been read."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_hung_up(future: asyncio.Future, receive: Receive | None, stop: StopFlag | None = None):
    """`future`'s result, unless the client hangs up first: then the future is cancelled, `stop` set, and
    ClientGone raised. Without `receive` (no client to watch) it is a plain await."""
    if receive is None or future.done():
        return await future
    listener = asyncio.ensure_future(hung_up(receive))
    try:
        await asyncio.wait((future, listener), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not listener.done():
            listener.cancel()
    if future.done():
        return future.result()
    if stop is not None:
        stop.set()
    future.cancel()
    raise ClientGone()


def in_chunks(run: Callable[[list[str]], Predictions], texts: Sequence[str], size: int, stop: StopFlag) -> Predictions:
    """`run(texts)` in calls of at most `size` texts (the micro-batch size), checking `stop` between them; one
    call when they fit, which is every request but the batches larger than a micro-batch."""
    if len(texts) <= size:
        return run(list(texts))
    parts = []
    for lo in range(0, len(texts), size):
        stop.check()
        parts.append(run(list(texts[lo : lo + size])))
    return Predictions(
        labels=np.concatenate([p.labels for p in parts]), scores=np.concatenate([p.scores for p in parts])
    )
