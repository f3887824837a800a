"""Request dependencies: the served model, the API key check, and strict JSON bodies (415/400/422 as problem+json).

Routes take what they need as the `...Dep` aliases at the end (FastAPI's `Annotated[T, Depends(f)]` habit), so
no handler fetches its model, registry or settings by hand. The prediction handlers are the exception: they also
run as plain Starlette routes (app.py HotRoute), without FastAPI's dependency machinery, so they call
`serving_model` themselves."""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Annotated, TypeVar

import orjson
from fastapi import Depends, Query, Request, Security
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, SecretStr, ValidationError
from xtag.config.rollout_policy import RolloutPolicy
from xtag.config.settings import Settings
from xtag.models.errors import XtagError
from xtag.service.http.problems import Problem, validation_problem
from xtag.service.observability.prometheus import DONE_KEY, MODEL_KEY, VERSION_KEY, served_name
from xtag.service.rollout.traffic import ROUTING_HEADER
from xtag.service.schemas import (
    IntegerText,
    ModelPutRequest,
    PromoteRequest,
    ReloadRequest,
    RollbackRequest,
    TrafficRequest,
)
from xtag.service.state.feedback_writer import FeedbackWriter
from xtag.service.state.model_repository import ModelRepository, UnknownModel
from xtag.service.state.model_slot import ServedModel

M = TypeVar("M", bound=BaseModel)

api_key_header = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,
    description="needed on /v1/* when XTAG_API_KEY is set (or Authorization: Bearer KEY)",
)


def served_model(request: Request, key: str | None = None) -> ServedModel:
    """The model serving this request, the one named in the path ({name}) or else the default, in the version
    pinned in the path ({version}) or else the one its traffic routes the request to (sticky by the X-Routing-Key
    header, else by `key`, the document's id); captured once so a reload mid-request cannot mix two models."""
    registry = request.app.state.registry
    params = request.path_params
    name = params.get("name")
    traffic = registry.traffic.get(registry.default if name is None else name)
    if traffic is not None:
        pinned = params.get("version")
        if pinned is not None:
            version, model = pinned, traffic.served(pinned)
        elif traffic.split:
            version, model = traffic.pick(request.headers.get(ROUTING_HEADER, key))
        else:
            version, model = traffic.pick()
        if model is not None:
            request.scope[MODEL_KEY] = served_name(model)  # the request's series carry both (ObservabilityMiddleware)
            request.scope[VERSION_KEY] = version
            return model
    model = named_model(registry, name, params.get("version"))
    request.scope[MODEL_KEY] = served_name(model)
    request.scope[VERSION_KEY] = model.served_version
    return model


async def serving_model(request: Request, name: str | None = None, key: str | None = None) -> ServedModel:
    """`served_model` for a prediction: with XTAG_EVICT=lru a model not in memory is loaded for it (the request
    waits, at most XTAG_LOAD_WAIT_S) and held until the answer is sent, so that it is not evicted meanwhile
    (service/state/eviction.py). `name`: the model's, when the path names it otherwise (Annif's project id); `key`: the
    routing key of a request that carries none in its header (served_model). A lazy
    model serves its stable version: versions and traffic splits are for models that stay loaded."""
    lazy = request.app.state.lazy
    wanted = name or request.path_params.get("name")
    if lazy is None or wanted is None or wanted in lazy.pinned:
        return served_model(request, key) if name is None else named_model(request.app.state.registry, name)
    name = wanted
    try:
        model, _ = await lazy.hold(name)
    except UnknownModel as exc:
        raise Problem(404, "unknown-model", str(exc), models=request.app.state.registry.names) from None
    except XtagError as exc:  # NoRoom, or the bundle failed to load
        raise Problem(503, "model-unavailable", f"model {name} is not loaded: {exc}", RETRY) from None
    request.scope[DONE_KEY] = partial(lazy.release, name)
    request.scope[MODEL_KEY] = served_name(model)
    return model


def named_model(registry: ModelRepository, name: str | None, version: str | None = None) -> ServedModel:
    """404 for a name (or a version of it) not served, listing those that are; 503 while the model is not ready."""
    try:
        slot = registry.default_slot if name is None else registry.slot(name)
    except UnknownModel as exc:
        raise Problem(404, "unknown-model", str(exc), models=registry.names) from None
    if slot is not None and version is not None:
        versions = registry.versions(slot.name)
        if version not in versions:
            raise Problem(
                404,
                "unknown-version",
                f"model {slot.name} has no version {version!r}; versions: {', '.join(versions)}",
                versions=list(versions),
            )
        slot = versions[version]
    if slot is None:
        raise Problem(503, "model-unavailable", "no model is being served yet: no bundle loaded", RETRY)
    if slot.current is None:
        why = slot.last_error or ("the bundle is still loading" if slot.loading else "no bundle loaded")
        if slot.idle:
            why = "not in memory now: it loads on its next prediction request (XTAG_EVICT=lru)"
        named = f" (model {slot.name})" if len(registry.slots) > 1 else ""
        if version is not None:
            named = f" (model {slot.name} version {version})"
        raise Problem(503, "model-unavailable", f"no model is being served yet{named}: {why}", RETRY)
    return slot.current


RETRY = {"Retry-After": "1"}


admin_key_header = APIKeyHeader(
    name="X-Admin-Key",
    scheme_name="AdminKeyHeader",
    auto_error=False,
    description="needed on /v1/admin/* (or Authorization: Bearer KEY); without XTAG_ADMIN_KEY configured the "
    "admin plane is off (403)",
)


def _key_matches(request: Request, header: str, expected: SecretStr) -> bool:
    """Constant-time comparison of `header` (or Authorization: Bearer) against `expected`."""
    given = request.headers.get(header)
    if given is None:
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth[:7].lower() == "bearer " else None
    return given is not None and hmac.compare_digest(given.encode(), expected.get_secret_value().encode())


async def require_api_key(request: Request, _documented: str | None = Security(api_key_header)) -> None:
    """Constant-time comparison against XTAG_API_KEY; a no-op when none is configured (also called directly)."""
    expected = request.app.state.settings.admin.api_key
    if expected is not None and not _key_matches(request, "x-api-key", expected):
        raise Problem(
            401,
            "unauthorized",
            "a valid API key is required in the X-API-Key header (or Authorization: Bearer)",
            headers={"WWW-Authenticate": "Bearer"},
        )


async def require_admin_key(request: Request, _documented: str | None = Security(admin_key_header)) -> None:
    """The admin plane has its own credential (XTAG_ADMIN_KEY), and is off without one: unloading, reloading or
    swapping a model is never open to anyone, nor to holders of the API key (issue 47). SIGHUP is the local way
    to reload without a key."""
    expected = request.app.state.settings.admin.admin_key
    if expected is None:
        raise Problem(
            403,
            "admin-key-required",
            f"{request.method} {request.url.path} is on the admin plane, which is off: set XTAG_ADMIN_KEY to "
            "enable it (an API key never grants admin); SIGHUP reloads every configured model locally",
        )
    if not _key_matches(request, "x-admin-key", expected):
        raise Problem(
            401,
            "unauthorized",
            "a valid admin key (XTAG_ADMIN_KEY) is required in the X-Admin-Key header (or Authorization: Bearer)",
            headers={"WWW-Authenticate": "Bearer"},
        )


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


OFF_LOOP_BYTES = 64 * 1024  # larger bodies are decoded and validated in a worker thread


def decode_json(body: bytes, content_type: str, optional: bool = False) -> object:
    """The body as JSON: 415 for another content type, 400 for invalid UTF-8 or JSON.

    An optional body may be empty, but the Content-Type must still say JSON: a POST with no body and no
    or a text/plain Content-Type is what a foreign web page can send without a CORS preflight."""
    if not _is_json(content_type):
        raise Problem(
            415, "unsupported-media-type", f"the body must be application/json, got {content_type or 'no Content-Type'}"
        )
    if optional and not body:
        return {}
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Problem(400, "invalid-utf8", f"the body is not valid UTF-8 (byte {exc.start}: {exc.reason})") from exc
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if not WIDE_INTEGER.search(body):
            raise Problem(400, "invalid-json", f"the body is not valid JSON ({exc})") from exc
    # orjson refuses an integer of 310 digits or more (a float's range); the json module reads it exactly
    try:
        return _read_exactly(body)
    except UnicodeEncodeError as exc:
        raise Problem(400, "invalid-json", "the body is not valid JSON (a string holds a lone surrogate)") from exc
    except RecursionError as exc:
        raise Problem(400, "invalid-json", "the body is not valid JSON (nested too deeply)") from exc
    except ValueError as exc:
        raise Problem(400, "invalid-json", f"the body is not valid JSON ({exc})") from exc


def document_limit(limit: int, status: int = 422) -> Callable[[object], None]:
    """A `check` for parse_body: at most `limit` documents in a batch, counted before validation, which
    costs some 7 µs a document (issue 30: 150,000 one-letter documents took 626 ms to reject after it)."""

    def check(data: object) -> None:
        documents = data.get("documents") if isinstance(data, dict) else None
        if isinstance(documents, list) and len(documents) > limit:
            raise Problem(
                status,
                "validation-error" if status == 422 else "bad-request",
                f"documents: {len(documents)} documents, the maximum per batch is {limit} (XTAG_MAX_BATCH_DOCUMENTS)",
            )

    return check


def check_text_lengths(request: Request, texts: list[str], what: str = "documents[{i}].text") -> None:
    """413 for the first text over XTAG_MAX_TEXT_CHARS; `what` names it (formatted with its index `i`)."""
    cap = request.app.state.settings.limits.max_text_chars
    for i, text in enumerate(texts):
        if len(text) > cap:
            raise Problem(
                413,
                "text-too-long",
                f"{what.format(i=i)} has {len(text)} characters; the limit is {cap} (XTAG_MAX_TEXT_CHARS)",
            )


# orjson reads an integer outside [-2^63, 2^64) as a float, and every such integer is written with 19 digits or more
WIDE_INTEGER = re.compile(rb"\d{19}")


def _exact_integer(text: str) -> int | IntegerText:
    """An integer as int, or as its text past int()'s digit limit (a guard against quadratic work, not a limit on
    ids: the body limit bounds their size)."""
    limit = sys.get_int_max_str_digits()
    return int(text) if limit == 0 or len(text) <= limit else IntegerText(text)


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # the json module would take NaN and Infinity, which orjson refuses


def _exact_reading(body: bytes) -> object | None:
    """The body read again with the json module, whose integers are exact; None when that cannot help: no integer
    wide enough for orjson to have made a float of it, invalid JSON, or nesting deeper than the json module's
    recursion allows (orjson's limit is 1,024 levels, the json module's about sys.getrecursionlimit())."""
    if not WIDE_INTEGER.search(body):
        return None
    try:
        return _read_exactly(body)
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return None


def _read_exactly(body: bytes) -> object:
    """The json module's reading, with integers exact and what orjson refuses refused too: NaN and Infinity, and
    lone surrogates (\ud800), which no store or answer could encode (UnicodeEncodeError)."""
    data = json.loads(body, parse_int=_exact_integer, parse_constant=_not_json)
    json.dumps(data, ensure_ascii=False).encode("utf-8")
    return data


def _decode_and_validate(
    body: bytes, content_type: str, model: type[M], optional: bool, check: Callable[[object], None] | None
) -> M:
    data = decode_json(body, content_type, optional)
    if check is not None:
        check(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
    # Ids must be exact integers, never floats (schemas.DocumentId): an id orjson read as a float fails validation,
    # so only a failing body is read again, exactly; a valid body costs nothing more (issue 38: 2^64+1 and 2^64+2
    # were one id).
    exact = _exact_reading(body)
    if exact is not None:
        try:
            return model.model_validate(exact)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False)
    raise validation_problem(errors, ("body",))


async def parse_body(
    request: Request, model: type[M], optional: bool = False, check: Callable[[object], None] | None = None
) -> M:
    """The body parsed into `model`; 422 names each invalid field (document it with `openapi_body`).

    `check` sees the decoded JSON first, to refuse what is cheap to refuse. A body over OFF_LOOP_BYTES is
    decoded and validated on a worker thread: a 2 MB body costs up to about a second of pydantic, which
    on the event loop would stall every other request meanwhile (issue 30: /health p50 went from 2 to
    1,255 ms beside two such clients). The thread still needs the GIL, but hands it back every few ms."""
    body = await request.body()
    args = (body, request.headers.get("content-type", ""), model, optional, check)
    if len(body) <= OFF_LOOP_BYTES:
        return _decode_and_validate(*args)
    return await asyncio.get_running_loop().run_in_executor(
        request.app.state.parse_executor, _decode_and_validate, *args
    )


def json_body(model: type[M], optional: bool = False) -> Callable[[Request], Awaitable[M]]:
    """`parse_body` as a dependency, for routes off the hot path."""

    async def dependency(request: Request) -> M:
        return await parse_body(request, model, optional)

    return dependency


def openapi_body(model: type[BaseModel], required: bool = True) -> dict:
    """`openapi_extra` that documents a json_body dependency's schema (registered by app.custom_openapi)."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": ref}}}}


# What routes declare. Async, so that FastAPI calls them on the event loop rather than in its thread pool.


async def app_settings(request: Request) -> Settings:
    return request.app.state.settings


async def model_repository(request: Request) -> ModelRepository:
    return request.app.state.registry


async def default_or_named_model(request: Request) -> ServedModel:
    """`served_model` as a dependency."""
    return served_model(request)


MODEL_QUERY = Query(description="the served model's name (default: the default model)", max_length=200)


async def queried_model(request: Request, model: Annotated[str | None, MODEL_QUERY] = None) -> ServedModel:
    """The model named by the `model` query parameter, else the default (404 listing the names, 503 while not
    ready); unlike `served_model`, it does not label the request's metrics with it."""
    return named_model(request.app.state.registry, model)


async def annif_project(request: Request, project_id: str) -> ServedModel:
    """The model served as Annif project `project_id` (404 as Annif words it, for a name not served; 503 while
    it loads; XTAG_EVICT=lru: loaded for the request)."""
    registry = request.app.state.registry
    if project_id not in registry.names:
        raise Problem(404, "not-found", f"Project '{project_id}' not found")
    return await serving_model(request, project_id)


async def feedback_writer(request: Request) -> FeedbackWriter:
    """The app's feedback writer, made on first use (a store that cannot open never delays startup). Behind
    require_admin_key, which already refuses without XTAG_ADMIN_KEY; refused here too, since what it writes
    becomes training data."""
    state, settings = request.app.state, request.app.state.settings
    if settings.admin.admin_key is None:
        raise Problem(
            403,
            "admin-key-required",
            "storing feedback needs an admin key (set XTAG_ADMIN_KEY): it becomes training data",
        )
    if state.feedback is None:
        state.feedback = FeedbackWriter(
            settings.feedback.feedback_db, settings.feedback.feedback_timeout_s, settings.feedback.feedback_max_pending
        )
    return state.feedback


SettingsDep = Annotated[Settings, Depends(app_settings)]
ModelRepositoryDep = Annotated[ModelRepository, Depends(model_repository)]
ServedModelDep = Annotated[ServedModel, Depends(default_or_named_model)]  # the default, or {name} in the path
QueriedModelDep = Annotated[ServedModel, Depends(queried_model)]  # the default, or ?model=NAME
AnnifProjectDep = Annotated[ServedModel, Depends(annif_project)]  # {project_id} in the path
FeedbackWriterDep = Annotated[FeedbackWriter, Depends(feedback_writer)]
ReloadBody = Annotated[ReloadRequest, Depends(json_body(ReloadRequest, optional=True))]
ModelPutBody = Annotated[ModelPutRequest, Depends(json_body(ModelPutRequest))]
TrafficBody = Annotated[TrafficRequest, Depends(json_body(TrafficRequest))]
PromoteBody = Annotated[PromoteRequest, Depends(json_body(PromoteRequest))]
RollbackBody = Annotated[RollbackRequest, Depends(json_body(RollbackRequest, optional=True))]
RolloutBody = Annotated[RolloutPolicy, Depends(json_body(RolloutPolicy))]
