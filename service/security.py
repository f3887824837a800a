"""Browser-facing hardening: nosniff on every response, and a locked-down dashboard page.

The dashboard is the one HTML page the service serves; its CSP allows only its own script, style and
fetches, and it may not be framed (clickjacking). Every response says nosniff, so a JSON or problem
body is never sniffed into something a browser would execute. CORS stays off unless XTAG_CORS_ORIGINS
names the origins allowed (app.py adds Starlette's CORSMiddleware for them).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
DASHBOARD_HEADERS = {
    "Content-Security-Policy": DASHBOARD_CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class NoSniffMiddleware:
    """Pure ASGI (no per-request task like BaseHTTPMiddleware): adds X-Content-Type-Options: nosniff."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"x-content-type-options" for k, _ in headers):
                    headers.append((b"x-content-type-options", b"nosniff"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_wrapper)
