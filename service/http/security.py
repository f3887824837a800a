"""Browser-facing hardening: nosniff on every response, and locked-down HTML pages.

The dashboard's CSP allows only its own script, style and fetches, and it may not be framed (clickjacking).
The API reference pages (/docs, /redoc: service/http/api_docs.py) get the same, loosened only where their viewers
need it: inline styles (both set style elements at run time) and ReDoc's search worker (a blob: URL). Every response says nosniff, so a JSON or problem
body is never sniffed into something a browser would execute. CORS stays off unless XTAG_CORS_ORIGINS
names the origins allowed (app.py adds ProblemCORSMiddleware for them).
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from xtag.service.http.problems import problem_response

DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
DASHBOARD_HEADERS = {
    "Content-Security-Policy": DASHBOARD_CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'"
)
DOCS_HEADERS = {**DASHBOARD_HEADERS, "Content-Security-Policy": DOCS_CSP}


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


class ProblemCORSMiddleware(CORSMiddleware):
    """Starlette's CORS, with its refused preflights (400) as problem+json like every other error."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        headers = {k: v for k, v in response.headers.items() if k not in ("content-type", "content-length")}
        detail = response.body.decode()  # e.g. "Disallowed CORS origin, headers"
        return problem_response(response.status_code, "cors-refused", detail, headers=headers)
