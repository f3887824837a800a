"""Request bodies are read whole before the app runs, within bounds of size, time and memory.

Size (XTAG_MAX_BODY_BYTES): 413 from Content-Length alone, or as soon as a streamed body passes it.
The 413 goes out at once, but the connection is closed only after the rest of the body has been read
and dropped (bounded in bytes and seconds, like nginx's lingering close). Clients such as
`http.client` write the whole body before they read anything: closing on a half-read body makes the
kernel answer their remaining data with a reset, and they report "Connection reset" or "Broken pipe"
instead of the 413 and its message. A client that sent `Expect: 100-continue` is not drained: it waits
for our answer before sending the body, so the 413 is all it needs.

Time (XTAG_BODY_TIMEOUT_S): a body not complete this long after its head gets 408 and the connection
closes. A deadline for the whole body, not an idle timer, which a byte a second would reset forever.
Because the body is read before the app runs, and limits.py admits a prediction request only once its
body is whole, a slow client holds a connection but never a prediction slot (issue 30: 256 connections
that each sent 1 byte of a 100-byte body denied every prediction until they closed).

Memory: the bodies held at once (being read, or by requests in flight) stay under a budget,
XTAG_MAX_QUEUE × XTAG_MAX_BODY_BYTES, the most that admitted requests could hold before bodies were
read ahead of admission; past it 503 with Retry-After. Without it the bodies being read would be
bounded only by the number of connections. (No budget when XTAG_MAX_QUEUE is 0, no bound.) Once bodies of
TRIM_BYTES or more have been let go and fewer than that are held, the heap's free pages are given back to the OS
(malloc_trim, on a thread): glibc keeps them otherwise, and 300 stalled 2 MB bodies left the RSS 500 MB higher
after they had gone (issue 47).

A client that goes away before its body is complete is not the server's error: one log line, the app
is not called, and the metrics count it as status 499 (observability.py).
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from xtag.service.http.problems import send_problem
from xtag.service.state.memory import trim_heap

DRAIN_SECONDS = 5.0  # longest a rejected body is read and dropped before the connection is closed
DRAIN_MIN_BYTES = 64 * 2**20  # most bytes of it read: this, or 16 × the limit when that is more
TRIM_BYTES = 32 * 2**20  # bodies let go since the last trim that make one worth it (a trim costs milliseconds)
RETRY_AFTER_S = 1  # what a busy server asks clients to wait; a queue drains in well under that
RETRY_AFTER = ((b"retry-after", str(RETRY_AFTER_S).encode()),)
CLOSE = ((b"connection", b"close"),)
log = logging.getLogger("xtag.service")


class Refusal(Exception):
    """Why a body was not taken: the answer to send, and whether the client is still sending the body."""

    def __init__(self, status: int, slug: str, detail: str, more_body: bool, headers: tuple = ()):
        super().__init__(detail)
        self.status, self.slug, self.detail, self.more_body, self.headers = status, slug, detail, more_body, headers


def expects_continue(scope: Scope) -> bool:
    return any(name == b"expect" and value.lower() == b"100-continue" for name, value in scope["headers"])


def declared_length(scope: Scope) -> int | None:
    """Content-Length (-1 when unreadable), 0 for a request without a body, None for a chunked one."""
    length = 0
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
        if name == b"transfer-encoding":
            length = None
    return length


class BodyReadMiddleware:
    """Reads each request body whole (never more than `limit` bytes, within `timeout_s`), then calls the app."""

    def __init__(
        self, app: ASGIApp, limit: int, timeout_s: float, budget: int | None, drain_seconds: float = DRAIN_SECONDS
    ):
        self.app, self.limit, self.timeout_s, self.budget = app, limit, timeout_s, budget
        self.drain_bytes, self.drain_seconds = max(16 * limit, DRAIN_MIN_BYTES), drain_seconds
        self.buffered = 0  # bytes of bodies held now, by all requests
        self.released = 0  # bytes of bodies let go since the heap was last trimmed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = declared_length(scope)
        if declared == 0:
            return await self.app(scope, receive, send)
        held = [0]  # bytes of this body buffered, counted in self.buffered until the request ends
        try:
            try:
                if declared is not None and declared > self.limit:
                    raise Refusal(
                        413,
                        "body-too-large",
                        f"request body of {declared} bytes is over the limit of {self.limit} bytes "
                        "(XTAG_MAX_BODY_BYTES)",
                        more_body=True,
                    )
                try:
                    async with asyncio.timeout(self.timeout_s):
                        body = await self._read(receive, held)
                except TimeoutError:
                    received = held[0]
                    self._release(held)
                    return await self._timed_out(scope, send, received, declared)
            except Refusal as refusal:
                self._release(held)  # dropped now, not after the drain
                return await self._reject(scope, receive, send, refusal)
            if body is None:
                log.info(
                    "%s %s: the client closed the connection after %d bytes of the body",
                    scope["method"],
                    scope["path"],
                    held[0],
                )
                return
            delivered = False

            async def replay() -> Message:
                nonlocal delivered
                if not delivered:
                    delivered = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # http.disconnect, when the client goes away or the response is complete

            await self.app(scope, replay, send)
        finally:
            self._release(held)

    def _release(self, held: list[int]) -> None:
        self.buffered -= held[0]
        self.released += held[0]
        held[0] = 0
        if self.released >= TRIM_BYTES and self.buffered < TRIM_BYTES:  # a burst is over: its pages can go back
            self.released = 0
            asyncio.get_running_loop().run_in_executor(None, trim_heap)

    async def _read(self, receive: Receive, held: list[int]) -> bytes | None:
        """The whole body, or None when the client went away; `held[0]` counts the bytes buffered so far."""
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            held[0] += len(chunk)
            self.buffered += len(chunk)
            if held[0] > self.limit:
                raise Refusal(
                    413,
                    "body-too-large",
                    f"request body is over the limit of {self.limit} bytes "
                    f"(XTAG_MAX_BODY_BYTES); stopped reading at {held[0]} bytes",
                    more,
                )
            if self.budget is not None and self.buffered > self.budget:
                raise Refusal(
                    503,
                    "overloaded",
                    f"the server holds {self.buffered} bytes of request bodies, more than its budget of "
                    f"{self.budget} (XTAG_MAX_QUEUE × XTAG_MAX_BODY_BYTES); retry after {RETRY_AFTER_S} s",
                    more,
                    RETRY_AFTER,
                )
            chunks.append(chunk)
            if not more:
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _timed_out(self, scope: Scope, send: Send, received: int, declared: int | None) -> None:
        of = f" of {declared}" if declared is not None and declared >= 0 else ""
        detail = (
            f"the request body was not complete within {self.timeout_s:g} s (XTAG_BODY_TIMEOUT_S); "
            f"{received}{of} bytes arrived"
        )
        await send_problem(send, 408, "body-timeout", detail, scope.get("path"), CLOSE)  # the server closes

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

    async def _reject(self, scope: Scope, receive: Receive, send: Send, refusal: Refusal) -> None:
        """Send the refusal, drain the body when the client is still sending it, then complete (and close)."""
        drain = refusal.more_body and not expects_continue(scope)
        headers = (*refusal.headers, *CLOSE)
        await send_problem(send, refusal.status, refusal.slug, refusal.detail, scope.get("path"), headers, drain)
        if drain:  # the client has the answer now
            await self._drain(receive)
            await send({"type": "http.response.body", "body": b""})  # complete: the server closes
