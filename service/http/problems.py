"""RFC 9457 problem+json for every error, so clients get a 4xx that says what is wrong, never a bare 500."""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from xtag.models.errors import XtagError
from xtag.service.http.hangups import ClientGone
from xtag.service.observability.prometheus import CLIENT_CLOSED

MEDIA_TYPE = "application/problem+json"
log = logging.getLogger("xtag.service")


class Problem(Exception):
    """An error answer: HTTP status, a short slug for `type`, and a detail naming the field at fault."""

    def __init__(self, status: int, slug: str, detail: str, headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(detail)
        self.status, self.slug, self.detail, self.headers, self.extra = status, slug, detail, headers, extra


def problem_body(status: int, slug: str, detail: str, instance: str | None = None, **extra: Any) -> bytes:
    body = {
        "type": f"urn:xtag:problem:{slug}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        **({"instance": instance} if instance else {}),
        **extra,
    }
    return orjson.dumps(body)


def problem_response(
    status: int,
    slug: str,
    detail: str,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response:
    return Response(
        problem_body(status, slug, detail, instance, **extra),
        status_code=status,
        media_type=MEDIA_TYPE,
        headers=headers,
    )


OIP_PATHS = ("/v2/health/", "/v2/models/")  # the Open Inference Protocol's routes (routes/oip.py), and GET /v2


def is_oip(path: str) -> bool:
    """Whether `path` is one of the protocol's, whose errors are its own shape (an unknown /v2/x is not)."""
    return path == "/v2" or path.startswith(OIP_PATHS)


def error_response(
    request: Request,
    status: int,
    slug: str,
    detail: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response:
    """problem+json, or on the Open Inference Protocol's routes its error object `{"error": detail}`: what a
    client sent wrong is a 400 there (the protocol says "typically 400"), where the /v1 API says 422."""
    path = request.url.path
    if not is_oip(path):
        return problem_response(status, slug, detail, path, headers, **extra)
    status = 400 if status == 422 else status
    return Response(orjson.dumps({"error": detail}), status_code=status, media_type="application/json", headers=headers)


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


MAX_ERRORS = 20  # listed in a 422; a 2 MB body can hold 150,000 invalid fields, a 10 MB answer


def validation_problem(errors: list[dict], prefix: tuple = ()) -> Problem:
    """422 from pydantic errors: the detail lists `field: message` for each one (the first MAX_ERRORS)."""
    items = [
        {"loc": _loc(prefix + tuple(e.get("loc", ()))), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in errors[:MAX_ERRORS]
    ]
    detail = "; ".join(f"{i['loc']}: {i['msg']}" for i in items) or "invalid request"
    if len(errors) > MAX_ERRORS:
        detail += f"; and {len(errors) - MAX_ERRORS} more errors"
    return Problem(422, "validation-error", detail, errors=items)


def install(app: FastAPI) -> None:
    """Map every exception a request can raise to problem+json (the protocol's error object under /v2)."""

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> Response:
        return error_response(request, exc.status, exc.slug, exc.detail, exc.headers, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(request: Request, exc: RequestValidationError) -> Response:
        p = validation_problem(list(exc.errors()))
        return error_response(request, p.status, p.slug, p.detail, **p.extra)

    @app.exception_handler(ValidationError)
    async def _validation(request: Request, exc: ValidationError) -> Response:
        p = validation_problem(exc.errors(include_url=False, include_input=False))
        return error_response(request, p.status, p.slug, p.detail, **p.extra)

    @app.exception_handler(XtagError)
    async def _xtag(request: Request, exc: XtagError) -> Response:
        return error_response(request, 422, "invalid-request", str(exc))

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=CLIENT_CLOSED)  # uvicorn sends nothing on a closed connection; metrics count it

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.method} {request.url.path}"
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            detail = f"method {request.method} is not allowed on {request.url.path}"
            headers = {**(headers or {}), "Allow": allowed_methods(request)}
        slug = HTTPStatus(exc.status_code).phrase.lower().replace(" ", "-")
        return error_response(request, exc.status_code, slug, detail, headers)


def allowed_methods(request: Request) -> str:
    """Every method some route of this path takes: Starlette's Allow names only the first route that matched the
    path, so PUT /v1/admin/models/{name} hid its DELETE (issue 47)."""
    methods: set[str] = set()
    for route in _leaves(request.app.router.routes):
        if route.matches(request.scope)[0] != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def _leaves(routes):
    """The routes themselves, through FastAPI's included routers (which match only their first route)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        yield from _leaves(included.routes) if included is not None else (route,)


class LastResortMiddleware:
    """Problem+json for what escapes the app: an exception (500, logged with its traceback) and a request
    cancelled by the graceful-shutdown limit (503 + Retry-After, one log line). uvicorn would answer both
    with a text/plain 500; and Starlette's own 500 handler sits outside every user middleware, so its
    answers lacked nosniff and were missing from the metrics. This one sits inside both."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except asyncio.CancelledError:
            if started:
                raise
            # uvicorn cancels requests still running at XTAG_GRACEFUL_SHUTDOWN_S; the answer is the one
            # thing left to do, so the cancellation ends here instead of in uvicorn's traceback and 500.
            # 503, not the 500: the server is going away, a retry elsewhere will succeed.
            log.warning("%s %s cancelled: the server is shutting down", scope["method"], scope["path"])
            detail = "the server is shutting down and stopped this request (XTAG_GRACEFUL_SHUTDOWN_S); retry"
            close = ((b"retry-after", b"1"), (b"connection", b"close"))
            await send_problem(send, 503, "shutting-down", detail, scope.get("path"), close)
        except Exception as exc:
            if started:
                raise  # nothing left to answer with; uvicorn logs it and closes the connection
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            detail = f"internal error ({type(exc).__name__}); see the server log"
            await send_problem(send, 500, "internal-error", detail, scope.get("path"))


async def send_problem(
    send: Send,
    status: int,
    slug: str,
    detail: str,
    instance: str | None,
    headers: tuple[tuple[bytes, bytes], ...] = (),
    more_body: bool = False,
) -> None:
    """A problem as raw ASGI messages, for middleware that answers before (or instead of) the app."""
    body = problem_body(status, slug, detail, instance)
    start = [(b"content-type", MEDIA_TYPE.encode()), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body, "more_body": more_body})


PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
OIP_ERROR = {  # the Open Inference Protocol's error object
    "type": "object",
    "properties": {"error": {"type": "string"}},
    "required": ["error"],
    "title": "InferenceError",
}


def problem_responses(codes: dict[int, str]) -> dict:
    """A route's `responses=`: each status with its description, as application/problem+json."""
    return {
        code: {"description": text, "content": {MEDIA_TYPE: {"schema": PROBLEM_REF}}} for code, text in codes.items()
    }


def document_problems(schema: dict) -> dict:
    """Make the OpenAPI say what the handlers send: every 4xx/5xx of every operation (FastAPI's own 422
    included, which it documents as application/json HTTPValidationError) is application/problem+json, and under
    /v2 the Open Inference Protocol's error object."""
    for path, item in schema.get("paths", {}).items():
        for operation in item.values():
            for code, response in operation.get("responses", {}).items():
                if str(code)[:1] in "45":
                    response["content"] = (
                        {"application/json": {"schema": OIP_ERROR}}
                        if is_oip(path)
                        else {MEDIA_TYPE: {"schema": PROBLEM_REF}}
                    )
                    if code == "422" and response.get("description") == "Validation Error":
                        response["description"] = "invalid field (the problem's `errors` lists each one)"
    components = schema.get("components", {}).get("schemas", {})
    text = orjson.dumps(schema.get("paths", {})).decode()
    for unused in ("HTTPValidationError", "ValidationError"):
        if f'/{unused}"' not in text:
            components.pop(unused, None)
    return schema
