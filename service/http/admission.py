"""Admission of prediction requests: at most `max_queue` in flight; past it 503 with Retry-After.

A prediction request is in flight from the moment its body is whole until its answer is sent: queued
for the predictor or predicting. Without this bound a flood of clients queues without end: every
admitted request waits behind all the others (latency grows with the crowd) and each holds its body
and parsed texts meanwhile (memory grows with it). Health, readiness, metrics and the rest of the API
are not counted and never turned away.

A request is refused before its body is read when the server is full already; otherwise it takes its
slot only when the last byte of its body arrives (body.py reads bodies whole before the app runs), so
a client that sends its body slowly, or never, holds no slot: issue 30 found 256 such connections
denying every prediction, indefinitely.

A refusal goes out at once, and the server then reads nothing more from that connection for the
Retry-After it asked for (http_guard.py acts on the HOLD_READING mark in the scope). A client that
honours Retry-After never notices; one that retries at once finds its retry read a second later.
Without this, a retry storm costs the server as many refusals as the clients can send: 1,000 clients
retrying at once cut useful throughput from 2,059 to 303 requests/s, admitted p99 1.3 s (issue 30).
Measured before choosing it (bench/service_load.py's storm phase, 15 s runs): holding the read for
the Retry-After of 1 s did better than for 0.25 s (410/s) or not at all (261-317/s); in the 60 s
before/after runs of bench/RESULTS.md, 287 → 1,126 requests/s and admitted p50 893 → 193 ms.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from xtag.service.http.problems import send_problem
from xtag.service.http.request_body import RETRY_AFTER, RETRY_AFTER_S

HOLD_READING = "xtag.hold_reading_s"  # scope key: seconds to read nothing more from this connection


class QueueFull(Exception):
    """Raised into the body reader when a body completes while every slot is taken."""


def is_prediction(scope: Scope) -> bool:
    """POST /v1/predict, /v1/predict/batch (and their /predict aliases), Annif's /v1/projects/{id}/suggest(-batch)."""
    path = scope["path"]
    return scope["method"] == "POST" and (
        path.startswith(("/v1/predict", "/predict")) or (path.startswith("/v1/projects/") and "/suggest" in path)
    )


class AdmissionMiddleware:
    """Counts prediction requests in flight; past `max_queue` (0: no bound) answers 503 + Retry-After."""

    def __init__(self, app: ASGIApp, max_queue: int, on_reject: Callable[[], None] | None = None):
        self.app, self.max_queue, self.on_reject = app, max_queue, on_reject
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.max_queue or not is_prediction(scope):
            return await self.app(scope, receive, send)
        if self.in_flight >= self.max_queue:
            return await self._refuse(scope, send)  # keep-alive: the server drops the unread (small) body itself
        admitted = False

        async def admitting_receive() -> Message:
            nonlocal admitted
            message = await receive()
            if not admitted and message["type"] == "http.request" and not message.get("more_body", False):
                if self.in_flight >= self.max_queue:
                    raise QueueFull()
                self.in_flight += 1
                admitted = True
            return message

        try:
            await self.app(scope, admitting_receive, send)
        except QueueFull:  # raised while the body was read, before the app (and any response) started
            await self._refuse(scope, send)
        finally:
            if admitted:
                self.in_flight -= 1

    async def _refuse(self, scope: Scope, send: Send) -> None:
        if self.on_reject is not None:
            self.on_reject()
        detail = (
            f"{self.in_flight} prediction requests are in flight, the most this server queues "
            f"(XTAG_MAX_QUEUE={self.max_queue}); retry after {RETRY_AFTER_S} s"
        )
        scope[HOLD_READING] = RETRY_AFTER_S
        await send_problem(send, 503, "overloaded", detail, scope.get("path"), RETRY_AFTER)
