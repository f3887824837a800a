"""The Open Inference Protocol (KServe v2 REST): health, server and model metadata, model readiness and infer, for
the clients and gateways that speak it (tritonclient, KServe, Seldon). Inference goes through /v1/predict's path
(routes/predict.py: its option checks, cost admission, micro-batcher, shadow and response limit); only the wire
format differs (service/http/oip.py). Errors are the protocol's `{"error": "..."}` (http/problems.py)."""

from __future__ import annotations

import asyncio
from functools import partial
from importlib import metadata

from fastapi import APIRouter, Request
from starlette.responses import Response
from xtag.service.deps import OFF_LOOP_BYTES, ModelRepositoryDep, require_api_key, served_model, serving_model
from xtag.service.http import oip
from xtag.service.http.problems import OIP_ERROR, Problem
from xtag.service.routes.predict import (
    ROUTING_PARAMETER,
    VERSION_HEADER_DOC,
    check_options,
    off_loop_if_large,
    respond,
    reweight_key,
    served_predictions,
)
from xtag.service.state.model_repository import ModelRepository, UnknownModel
from xtag.service.state.model_slot import ModelSlot

router = APIRouter(tags=["open inference protocol"])  # behind the API key, as /v1 is
health_router = APIRouter(tags=["open inference protocol"])  # open, as /health and /ready are: probes carry no key
PATHS = ("/v2/models/{name}", "/v2/models/{name}/versions/{version}")
PATH_PARAMETERS = {
    "/v2/models/{name}": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
    "/v2/models/{name}/versions/{version}": [
        {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}},
        {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}},
    ],
}
HOT_ROUTES = tuple(f"{path}/infer" for path in PATHS)


def errors(codes: dict[int, str]) -> dict:
    return {
        code: {"description": text, "content": {"application/json": {"schema": OIP_ERROR}}}
        for code, text in codes.items()
    }


MODEL_ERRORS = {404: "no model of that name, or no such version of it", 503: "the model is not loaded yet"}


def model_slot(registry: ModelRepository, name: str, version: str | None) -> ModelSlot:
    """The slot a (name, version) of the protocol's readiness names (404 for a name or version not served); the
    routes that predict resolve theirs as /v1's do (deps.served_model: the version pinned, or the traffic's)."""
    try:
        return registry.slot(name) if version is None else registry.versions(name)[version]
    except UnknownModel as exc:
        raise Problem(404, "unknown-model", str(exc)) from None
    except KeyError:
        versions = ", ".join(registry.versions(name))
        raise Problem(
            404, "unknown-version", f"model {name} has no version {version!r}; versions: {versions}"
        ) from None


@health_router.get("/v2/health/live", response_model=oip.ServerLive, summary="Liveness (the protocol's)")
async def live() -> dict:
    return {"live": True}


@health_router.get(
    "/v2/health/ready",
    response_model=oip.ServerReady,
    summary="Readiness (the protocol's): 200 once the default model serves, as /ready",
    responses=errors({503: "not ready; `error` says why"}),
)
async def ready(registry: ModelRepositoryDep) -> dict:
    slot = registry.default_slot
    if slot is None:
        raise Problem(503, "not-ready", "not ready: no bundle loaded", {"Retry-After": "1"})
    not_ready(slot)
    return {"ready": True}


def not_ready(slot: ModelSlot) -> None:
    """503 (with why) unless the slot's model is loaded, warmed up and its files unchanged on disk."""
    model = slot.current
    changed = slot.changed if model is not None else None
    if model is None or changed:
        why = changed or slot.last_error or ("loading the bundle" if slot.loading else "no bundle loaded")
        raise Problem(503, "not-ready", f"model {slot.name} not ready: {why}", {"Retry-After": "1"})


async def model_ready(request: Request, registry: ModelRepositoryDep) -> dict:
    slot = model_slot(registry, request.path_params["name"], request.path_params.get("version"))
    not_ready(slot)
    return {"name": slot.name, "ready": True}


@router.get(
    "/v2",
    response_model=oip.ServerMetadata,
    responses=errors({401: "missing API key"}),
    summary="Server metadata (the protocol's)",
)
async def server_metadata() -> dict:
    return {"name": "xtag", "version": metadata.version("xtag"), "extensions": oip.EXTENSIONS}


async def model_metadata(request: Request) -> dict:
    model = served_model(request)
    return {
        "name": model.served_as,
        "versions": list(request.app.state.registry.versions(model.served_as)),
        "platform": f"xtag_{model.kind}",
        "inputs": oip.INPUTS,
        "outputs": oip.OUTPUTS,
    }


async def infer(request: Request) -> Response:
    await require_api_key(request)  # served as a plain Starlette route too (app.py HotRoute), as /v1/predict is
    model = await serving_model(request)  # the version pinned in the path, else the one its traffic routes to
    body = await request.body()
    read = partial(oip.read_request, body, request.headers.get(oip.HEADER_LENGTH))
    if len(body) <= OFF_LOOP_BYTES:
        infer_request, texts = read()
    else:
        infer_request, texts = await asyncio.get_running_loop().run_in_executor(request.app.state.parse_executor, read)
    opts = oip.options_of(infer_request)
    outputs = oip.outputs_of(infer_request)
    most = request.app.state.settings.limits.max_batch_documents
    if len(texts) > most:
        raise oip.bad(f'input "text": {len(texts)} texts, the maximum per request is {most} (XTAG_MAX_BATCH_DOCUMENTS)')
    k, beam, a, filters = check_options(request, model, opts, texts, "text[{i}]")
    preds = await served_predictions(request, model, texts, k, beam, a, reweight_key(opts), opts.rerank, None, filters)
    head = {"model_name": model.served_as, "model_version": model.served_version}
    if infer_request.id is not None:
        head["id"] = infer_request.id
    encode = partial(oip.encode, model.names, preds, opts.threshold, outputs, head)
    content, headers = await off_loop_if_large(request, encode, preds.labels.size)
    media_type = "application/octet-stream" if headers else "application/json"
    return respond(request, model, content, media_type, headers)


INFER_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InferRequest"}}},
    }
}
INFER_ERRORS = errors(
    {
        **MODEL_ERRORS,
        400: "a wrong input, datatype, shape, parameter or output, or a body that is not the protocol's",
        401: "missing API key",
        413: "body or text too large, or the request would cost too much (as /v1/predict)",
    }
)
for _path in PATHS:
    _named = {"parameters": PATH_PARAMETERS[_path]}
    _which = "" if _path == PATHS[0] else ", of one version"
    _suffix = "" if _path == PATHS[0] else "_version"
    router.add_api_route(
        _path,
        model_metadata,
        methods=["GET"],
        response_model=oip.ModelMetadata,
        responses=errors({**MODEL_ERRORS, 401: "missing API key"}),
        openapi_extra=_named,
        summary=f"Model metadata (the protocol's){_which}: its versions, input and outputs",
        operation_id=f"oip_model_metadata{_suffix}",
    )
    health_router.add_api_route(
        f"{_path}/ready",
        model_ready,
        methods=["GET"],
        response_model=oip.ModelReady,
        responses=errors({**MODEL_ERRORS, 503: "not ready; `error` says why"}),
        openapi_extra=_named,
        summary=f"Model readiness (the protocol's){_which}",
        operation_id=f"oip_model_ready{_suffix}",
    )
    router.add_api_route(
        f"{_path}/infer",
        infer,
        methods=["POST"],
        response_model=oip.InferResponse,
        responses={
            **INFER_ERRORS,
            200: {
                "description": "the outputs; with binary outputs asked for, the JSON header (its length in "
                "Inference-Header-Content-Length) followed by their bytes",
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                "headers": VERSION_HEADER_DOC,
            },
        },
        # unpinned, the model's traffic chooses the version, sticky by X-Routing-Key
        openapi_extra={**INFER_BODY, "parameters": [*_named["parameters"], *([] if _suffix else [ROUTING_PARAMETER])]},
        summary=f"Top-k labels and scores for texts (the protocol's inference){_which}",
        operation_id=f"oip_infer{_suffix}",
    )
