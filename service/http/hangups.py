"""A client that hangs up while its request is being worked on: its work is dropped or stopped, and it counts as 499.

Once a request's body is whole, the next ASGI `receive` returns `http.disconnect` when the client goes away
(or when the answer is complete). Nobody called it while a handler waited for a worker thread, so a client that
left was noticed only when its answer could not be sent, and counted as 200: issue 38 saw a 256-document explain
batch run to its end after its client had gone. Here a request that hands work to a thread listens for the
hang-up meanwhile (one task per hand-off, only on that path: an inlined request never waits). On a hang-up the
work's future is cancelled, which drops work that has not started (a queued micro-batch member, a call still in
the pool's queue), and its StopFlag is set, which a running call checks between the chunks it works in anyway
(models/inference/stopping.py: explained documents, encoder batches); the handler raises ClientGone, answered (to nobody)
as 499. A TF-IDF prediction is not cut into chunks for this: one call of 256 debtags texts took 28 ms, four of 64
took 57 ms (a fixed cost per call), and it is over sooner than a hang-up is noticed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from starlette.types import Receive
from xtag.models.inference.stopping import StopFlag, stoppable

T = TypeVar("T")


class ClientGone(Exception):
    """The client hung up before its answer: there is nobody left to answer (problems.py: status 499, unsent)."""


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


def stopping(fn: Callable[[list[str]], T], stop: StopFlag, texts: list[str]) -> T:
    """`fn(texts)` with `stop` as the thread's stop flag (models/inference/stopping.py): for a worker thread."""
    with stoppable(stop):
        return fn(texts)
