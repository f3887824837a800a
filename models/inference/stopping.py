"""Stopping a long prediction or explanation between two of its chunks, when nobody waits for its result any more.

The service sets a StopFlag (from its event loop) when a client hangs up (service/http/hangups.py); the worker thread
running that client's call runs it inside `stoppable(flag)`, and the loops that already work in chunks (encoder
batches, explained documents) call `check()` between them: a read of a thread-local and of an Event, nothing
on the hot path of a call without a flag. The flag is per thread and per call, set only for the `with` block, so
no call sees another's (and training, evaluation and the CLI never set one).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Stopped(Exception):
    """Raised by `check()` once the call's flag is set: its result would reach nobody."""


class StopFlag(threading.Event):
    """Set from another thread to stop a call at its next `check()`."""


_current = threading.local()


@contextmanager
def stoppable(flag: StopFlag | None) -> Iterator[None]:
    """Run the block with `flag` as this thread's stop flag (None: nothing stops it)."""
    previous = getattr(_current, "flag", None)
    _current.flag = flag
    try:
        yield
    finally:
        _current.flag = previous


def check() -> None:
    """Raise Stopped if this thread's current call was asked to stop."""
    flag = getattr(_current, "flag", None)
    if flag is not None and flag.is_set():
        raise Stopped()
