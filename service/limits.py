"""Request body size limit as ASGI middleware: 413 from Content-Length alone, or as soon as a streamed body passes it."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.problems import MEDIA_TYPE, problem_body


class BodyTooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """Never buffers more than `limit` bytes of a request body."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app, self.limit = app, limit

    async def _reject(self, scope: Scope, send: Send, detail: str) -> None:
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
        await send({"type": "http.response.body", "body": body})

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
                        send,
                        f"request body of {declared} bytes is over the limit of "
                        f"{self.limit} bytes (XTAG_MAX_BODY_BYTES)",
                    )
                break
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
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
                    send,
                    f"request body is over the limit of {self.limit} bytes "
                    f"(XTAG_MAX_BODY_BYTES); stopped reading at {received} bytes",
                )
