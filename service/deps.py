"""Request dependencies: the served model, the API key check, and strict JSON bodies (415/400/422 as problem+json)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TypeVar

import orjson
from fastapi import Request, Security
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ValidationError

from service.problems import Problem, validation_problem
from service.registry import ServedModel
from service.settings import Settings

M = TypeVar("M", bound=BaseModel)

api_key_header = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,
    description="needed on /v1/* when XTAG_API_KEY is set (or Authorization: Bearer KEY)",
)


def settings(request: Request) -> Settings:
    return request.app.state.settings


def served_model(request: Request) -> ServedModel:
    """The model serving this request; captured once so a reload mid-request cannot mix two models."""
    model = request.app.state.registry.current
    if model is None:
        registry = request.app.state.registry
        why = registry.last_error or ("the bundle is still loading" if registry.loading else "no bundle loaded")
        raise Problem(503, "model-unavailable", f"no model is being served yet: {why}", headers={"Retry-After": "1"})
    return model


async def require_api_key(request: Request, _documented: str | None = Security(api_key_header)) -> None:
    """Constant-time comparison against XTAG_API_KEY; a no-op when none is configured (also called directly)."""
    expected = request.app.state.settings.api_key
    if expected is None:
        return
    given = request.headers.get("x-api-key")
    if given is None:
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth[:7].lower() == "bearer " else None
    if given is None or not hmac.compare_digest(given.encode(), expected.get_secret_value().encode()):
        raise Problem(
            401,
            "unauthorized",
            "a valid API key is required in the X-API-Key header (or Authorization: Bearer)",
            headers={"WWW-Authenticate": "Bearer"},
        )


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def read_json(request: Request, optional: bool = False) -> object:
    """The body as JSON: 415 for another content type, 400 for invalid UTF-8 or JSON."""
    body = await request.body()
    if optional and not body:
        return {}
    content_type = request.headers.get("content-type", "")
    if not _is_json(content_type):
        raise Problem(
            415, "unsupported-media-type", f"the body must be application/json, got {content_type or 'no Content-Type'}"
        )
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Problem(400, "invalid-utf8", f"the body is not valid UTF-8 (byte {exc.start}: {exc.reason})") from exc
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Problem(400, "invalid-json", f"the body is not valid JSON ({exc})") from exc


async def parse_body(request: Request, model: type[M], optional: bool = False) -> M:
    """The body parsed into `model`; 422 names each invalid field (document it with `openapi_body`)."""
    data = await read_json(request, optional)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc.errors(include_url=False, include_input=False), ("body",)) from exc


def json_body(model: type[M], optional: bool = False) -> Callable[[Request], Awaitable[M]]:
    """`parse_body` as a dependency, for routes off the hot path."""

    async def dependency(request: Request) -> M:
        return await parse_body(request, model, optional)

    return dependency


def openapi_body(model: type[BaseModel], required: bool = True) -> dict:
    """`openapi_extra` that documents a json_body dependency's schema (registered by app.custom_openapi)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": ref}}}}
