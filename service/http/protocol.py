"""uvicorn's HTTP protocols with bounds on each request head, and problem+json for the errors uvicorn answers itself.

uvicorn 0.54 reads a request head without bound: httptools buffers a header that never ends (issue 30:
three unfinished 100 MB headers took 300 MB), and a connection whose head never completes is never
closed, since uvicorn's only timer is the keep-alive one between requests (19,936 of 20,000 file
descriptors were held by partial heads). The subclasses here add:

- XTAG_MAX_HEADER_BYTES: a head (request line and headers) over it gets 431 and the connection closes.
  With httptools it is counted on the bytes received while the head is open, so at most one read past
  the limit is ever buffered, and checked exactly once the head is parsed; with h11, on the bytes
  h11 holds while it waits for a head (h11's own bound, uvicorn's h11_max_incomplete_event_size,
  applies only to a head still incomplete, and uvicorn answers it with a 400).
- XTAG_HEADER_TIMEOUT_S: the head must be complete this long after the connection opened, or after its
  first byte on a kept-alive connection (idle time between requests stays uvicorn's keep-alive
  timeout). Past it: 408 if part of a head came, else the connection is closed without an answer. A
  deadline, not an idle timer: a client sending a byte a second would reset an idle timer forever.
- uvicorn's own 400 for malformed HTTP as problem+json with nosniff, like every other error.
- After a response whose scope bears limits.HOLD_READING (admission's 503), nothing more is read from
  the connection for that many seconds: the Retry-After the client was given, enforced (limits.py says
  why and what it measured).
- A drain on shutdown (SIGTERM, or a worker retired by a SIGHUP roll) that loses no request. uvicorn closes
  idle keep-alive connections at once, while a client may already be sending its next request on one:
  the request is lost and the client gets a reset (issue 38; bench/rolling_reload.py counts them). Here
  every response from then on carries `Connection: close` (h11 too, where uvicorn closed without saying
  so), and an idle connection stays open for XTAG_DRAIN_GRACE_S: a request arriving on it meanwhile is
  served (with `Connection: close`), and one still idle then is closed. uvicorn stops accepting first,
  and with several workers it retires a worker only once its replacement serves. Pipelined requests
  queued behind the one in flight are still lost, as with uvicorn (clients that pipeline must retry).

server.uvicorn_options names these classes by import string (worker processes import them); the limits
come from the served app's settings (app.state.settings).
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from xtag.config.settings import Limits, Server, Settings
from xtag.service.http.admission import HOLD_READING
from xtag.service.http.problems import MEDIA_TYPE, problem_body


def _limits(config) -> tuple:
    """The head's size and deadline and the drain's times of the app uvicorn serves (unwrapping uvicorn's own
    middleware), or their defaults."""
    app = config.loaded_app
    while app is not None and not hasattr(app, "state"):
        app = getattr(app, "app", None)
    settings = getattr(getattr(app, "state", None), "settings", None)
    limits, server = (settings.limits, settings.server) if isinstance(settings, Settings) else (Limits(), Server())
    return limits.max_header_bytes, limits.header_timeout_s, server.drain_grace_s, server.graceful_shutdown_s


DRAINING = "xtag_draining"  # attribute of uvicorn's ServerState, set once its shutdown has begun


class HeadGuard:
    """Deadline and size bound for request heads, and the drain on shutdown; precedes a uvicorn HTTP protocol
    class in the MRO."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self.max_head_bytes, self.head_timeout_s, drain_grace_s, graceful_s = _limits(self.config)
        self.drain_grace_s = min(drain_grace_s, graceful_s)  # uvicorn stops waiting for connections then
        self.head_bytes = 0  # received while the current head is open
        self.head_timer: asyncio.TimerHandle | None = None
        self.refused = False
        self.hold_timer: asyncio.TimerHandle | None = None
        self.drain_timer: asyncio.TimerHandle | None = None
        self.draining = False
        self.arm_head_timer()  # a new connection owes us a head: no keep-alive timer runs yet
        if getattr(self.server_state, DRAINING, False):  # accepted as the listener closed: drain it too
            self.shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        self.head_complete()
        for timer in (self.hold_timer, self.drain_timer):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown, which would close an idle connection at once: instead the response in
        flight, or the next one within the grace, closes it, and only a connection idle throughout is closed."""
        setattr(self.server_state, DRAINING, True)
        self.draining = True
        if self.cycle is not None and not self.cycle.response_complete:
            self.close_after_response()
        elif self.drain_timer is None:
            self.drain_timer = self.loop.call_later(self.drain_grace_s, self.close_if_idle)

    def request_started(self) -> None:
        """A new request cycle exists (its head is parsed); during a drain it is the connection's last."""
        if self.draining:
            self.close_after_response()

    def close_after_response(self) -> None:
        self.cycle.keep_alive = False  # httptools: `connection: close` in the head, then uvicorn closes

    def close_if_idle(self) -> None:
        self.drain_timer = None
        idle = self.cycle is None or self.cycle.response_complete
        if idle and not self.head_bytes and not self.transport.is_closing():
            self.transport.close()

    def on_response_complete(self) -> None:
        cycle = self.cycle  # with pipelining it may be the next request's already: then no hold
        super().on_response_complete()
        hold = cycle.scope.get(HOLD_READING) if cycle is not None and cycle.response_complete else None
        if hold and not self.transport.is_closing():
            self.flow.pause_reading()
            self.hold_timer = self.loop.call_later(hold, self.flow.resume_reading)

    def arm_head_timer(self) -> None:
        if self.head_timer is None:
            self.head_timer = self.loop.call_later(self.head_timeout_s, self.head_timed_out)

    def head_complete(self) -> None:
        self.head_bytes = 0
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def head_timed_out(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        if self.head_bytes:
            self.refuse(
                408,
                "header-timeout",
                f"the request head was not complete within {self.head_timeout_s:g} s (XTAG_HEADER_TIMEOUT_S)",
            )
        else:
            self.transport.close()

    def head_too_large(self, size: int) -> None:
        self.refuse(
            431,
            "header-too-large",
            f"the request head has more than {self.max_head_bytes} bytes (XTAG_MAX_HEADER_BYTES); got {size}",
        )

    def send_400_response(self, msg: str) -> None:
        self.refuse(400, "bad-request", "the request is not valid HTTP/1.1")

    def refuse(self, status: int, slug: str, detail: str) -> None:
        """Answer `status` as problem+json (unless a response is under way on this connection) and close."""
        self.refused = True
        self.head_complete()
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            body = problem_body(status, slug, detail)
            head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n".encode()]
            for name, value in self.server_state.default_headers:
                head += [name, b": ", value, b"\r\n"]
            head.append(
                f"content-type: {MEDIA_TYPE}\r\ncontent-length: {len(body)}\r\n"
                "x-content-type-options: nosniff\r\nconnection: close\r\n\r\n".encode()
            )
            self.transport.write(b"".join(head) + body)
        self.transport.close()


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # no httptools: server.py picks H11Guard
    HttpToolsGuard = None
else:

    class HttpToolsGuard(HeadGuard, HttpToolsProtocol):
        """httptools: counts the bytes of an open head as they arrive, checks its exact size when parsed."""

        def connection_made(self, transport: asyncio.Transport) -> None:
            self.in_head, self.heads = True, 0
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return
            open_before, heads = self.in_head, self.heads
            super().data_received(data)
            if open_before and heads == self.heads and not self.transport.is_closing():
                # the head (or the gap before it) stayed open throughout: all of `data` belongs to it
                self.head_bytes += len(data)
                if self.head_bytes > self.max_head_bytes:
                    return self.head_too_large(self.head_bytes)
                self.arm_head_timer()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.arm_head_timer()  # the first byte of a head, e.g. the next one on a kept-alive connection

        def on_headers_complete(self) -> None:
            self.in_head, self.heads = False, self.heads + 1
            self.head_complete()
            if self.refused:
                return
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > self.max_head_bytes:
                return self.head_too_large(size)
            super().on_headers_complete()
            self.request_started()

        def on_body(self, body: bytes) -> None:
            if not self.refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            self.in_head = True  # what comes next is the next request's head
            if not self.refused:
                super().on_message_complete()


class H11Guard(HeadGuard, H11Protocol):
    """h11: the head is what h11 holds while it waits for a request (IDLE); a new cycle means it came whole."""

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.conn.their_state is h11.IDLE:
            pending = self.conn.trailing_data[0] + data
            end = pending.find(b"\r\n\r\n")
            size = len(pending) if end < 0 else end + 4
            if size > self.max_head_bytes:
                return self.head_too_large(size)
        cycle = self.cycle
        awaiting = cycle is None or cycle.response_complete
        super().data_received(data)
        if self.cycle is not cycle:
            self.head_complete()
            self.request_started()
        elif awaiting and not self.transport.is_closing():
            self.head_bytes += len(data)
            self.arm_head_timer()

    def close_after_response(self) -> None:
        """uvicorn's h11 cycle closes without saying so; h11 says `connection: close` once it knows (its
        keep-alive state has no public setter), if the response has not started yet."""
        super().close_after_response()
        self.conn._cstate.process_keep_alive_disabled()
