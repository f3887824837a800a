"""Request limits as ASGI middleware: body size (413) and admission of prediction requests (503 when full).

Body size: 413 from Content-Length alone, or as soon as a streamed body passes it.

The 413 goes out at once, but the connection is closed only after the rest of the body has been read
and dropped (bounded in bytes and seconds, like nginx's lingering close). Clients such as
`http.client` write the whole body before they read anything: closing on a half-read body makes the
kernel answer their remaining data with a reset, and they report "Connection reset" or "Broken pipe"
instead of the 413 and its message. A client that sent `Expect: 100-continue` is not drained: it waits
for our answer before sending the body, so the 413 is all it needs.

Admission: at most `max_queue` prediction requests are in flight (being read, queued for the
predictor or predicting); one more is answered 503 with Retry-After before its body is read. Without
this bound a flood of clients queues without end: every admitted request waits behind all the others
(latency grows with the crowd) and each holds its body and parsed texts meanwhile (memory grows with
it). Health, readiness, metrics and the rest of the API are not counted and never turned away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from xtag.service.problems import MEDIA_TYPE, problem_body

RETRY_AFTER_S = 1  # what an overloaded server asks clients to wait; a queue drains in well under that
DRAIN_SECONDS = 5.0  # longest a rejected body is read and dropped before the connection is closed
DRAIN_MIN_BYTES = 64 * 2**20  # most bytes of it read: this, or 16 × the limit when that is more


class BodyTooLarge(Exception):
    pass


def expects_continue(scope: Scope) -> bool:
    return any(name == b"expect" and value.lower() == b"100-continue" for name, value in scope["headers"])


class BodyLimitMiddleware:
    """Never buffers more than `limit` bytes of a request body."""

    def __init__(self, app: ASGIApp, limit: int, drain_seconds: float = DRAIN_SECONDS):
        self.app, self.limit = app, limit
        self.drain_bytes, self.drain_seconds = max(16 * limit, DRAIN_MIN_BYTES), drain_seconds

    async def _drain(self, receive: Receive) -> None:
        """Read and drop what is left of the request body, within the byte and time bounds."""
        drained = 0
        try:
            async with asyncio.timeout(self.drain_seconds):
                while drained < self.drain_bytes:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # the client went away
                    drained += len(message.get("body", b""))
                    if not message.get("more_body", False):
                        return
        except TimeoutError:
            pass

    async def _reject(self, scope: Scope, receive: Receive, send: Send, detail: str, more_body: bool) -> None:
        """Send the 413, drain the body when the client is still sending it, then complete (and close)."""
        body = problem_body(413, "body-too-large", detail, scope.get("path"))
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", MEDIA_TYPE.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        drain = more_body and not expects_continue(scope)
        await send({"type": "http.response.body", "body": body, "more_body": drain})  # the client has it now
        if drain:
            await self._drain(receive)
            await send({"type": "http.response.body", "body": b""})  # complete: the server closes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.limit:
                    return await self._reject(
                        scope,
                        receive,
                        send,
                        f"request body of {declared} bytes is over the limit of "
                        f"{self.limit} bytes (XTAG_MAX_BODY_BYTES)",
                        more_body=True,
                    )
                break
        received = 0
        started = more_body = False

        async def limited_receive() -> Message:
            nonlocal received, more_body
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                more_body = message.get("more_body", False)
                if received > self.limit:
                    raise BodyTooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(
                    scope,
                    receive,
                    send,
                    f"request body is over the limit of {self.limit} bytes "
                    f"(XTAG_MAX_BODY_BYTES); stopped reading at {received} bytes",
                    more_body,
                )


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
            if self.on_reject is not None:
                self.on_reject()
            # keep-alive: the server discards the unread (small) body itself once the response is complete
            body = problem_body(
                503,
                "overloaded",
                f"{self.in_flight} prediction requests are in flight, the most this server queues "
                f"(XTAG_MAX_QUEUE={self.max_queue}); retry after {RETRY_AFTER_S} s",
                scope.get("path"),
            )
            headers = [
                (b"content-type", MEDIA_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(RETRY_AFTER_S).encode()),
            ]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
