"""The admin plane per model: POST /v1/admin/models/{name}/reload, PUT (load a bundle under a name) and DELETE.

Fenced as /v1/admin/reload is (routes/admin.py): the admin credential (off without XTAG_ADMIN_KEY), bundles
only under XTAG_BUNDLE_ROOT, one load per model at a time (409) and one per XTAG_RELOAD_INTERVAL_S (429), JSON
bodies only. An unloaded configured model comes back by SIGHUP too. Each call touches its model alone: the others keep
serving, and a load that fails leaves the model's old bundle (if any) in place.
"""

from __future__ import annotations

import os
import signal

from fastapi import APIRouter, Request
from xtag.config.model_set import ModelSpec
from xtag.models.errors import XtagError
from xtag.service.deps import ModelPutBody, ModelRepositoryDep, SettingsDep, openapi_body
from xtag.service.http.problems import Problem, problem_responses
from xtag.service.routes.admin import reload_model, resolve_target, throttle
from xtag.service.schemas import ModelPutRequest, ReloadResponse
from xtag.service.state.model_repository import DefaultModelBusy, UnknownModel
from xtag.service.state.model_slot import ReloadInProgress

router = APIRouter(tags=["admin"])
COMMON = {401: "missing or wrong admin key", 403: "no XTAG_ADMIN_KEY configured: the admin plane is off"}
LIMITED = {429: "this model was loaded less than XTAG_RELOAD_INTERVAL_S ago (Retry-After says when to retry)"}
NAMED = {404: "no model of that name is served (the detail lists them)"}


def slot_or_404(request: Request, name: str):
    registry = request.app.state.registry
    try:
        return registry.slot(name)
    except UnknownModel as exc:
        raise Problem(404, "unknown-model", str(exc), models=registry.names) from None


def single_worker(request: Request, what: str) -> None:
    if request.app.state.settings.server.workers > 1:
        raise Problem(
            409,
            "multi-worker",
            f"{what} changes one worker only; with several, change the configuration (XTAG_MODELS, models.toml) "
            "and restart, or send SIGHUP to reload every model in place",
        )


async def _load(request: Request, name: str, target=None) -> dict:
    """The load, its failure as problem+json: 429 too soon after the last, 409 when this model is already loading,
    422 when the bundle failed."""
    throttle(request, name)
    try:
        return await reload_model(request.app, target, wait=False, name=name)
    except ReloadInProgress as exc:
        raise Problem(409, "reload-in-progress", str(exc), headers={"Retry-After": "1"}) from exc
    except XtagError as exc:
        slot = request.app.state.registry.slots.get(name)  # gone: a new name that failed (registry.put)
        current = slot.current if slot is not None else None
        still = f"; still serving {current.ref['name']} {current.ref['version']}" if current else ""
        raise Problem(422, "reload-failed", f"model {name}: {exc}{still}") from exc


@router.post(
    "/v1/admin/models/{name}/reload",
    response_model=ReloadResponse,
    summary="Reload one model from its configured bundle; the others keep serving, and it keeps its old bundle if "
    "the new one fails",
    responses=problem_responses(
        {
            **COMMON,
            **NAMED,
            **LIMITED,
            409: "this model is already loading",
            422: "the bundle did not load or warm up",
        }
    ),
)
async def reload_one(request: Request, name: str, settings: SettingsDep) -> dict:
    slot_or_404(request, name)
    summary = await _load(request, name)
    if settings.server.uvicorn_supervisor_pid == os.getppid():  # roll every sibling worker onto it
        os.kill(os.getppid(), signal.SIGHUP)
    return summary


@router.put(
    "/v1/admin/models/{name}",
    response_model=ReloadResponse,
    openapi_extra=openapi_body(ModelPutRequest),
    summary="Serve a bundle under XTAG_BUNDLE_ROOT as model NAME: a new model, or a new bundle for a served one",
    responses=problem_responses(
        {
            **COMMON,
            400: "invalid JSON or UTF-8",
            403: "no XTAG_ADMIN_KEY configured (the admin plane is off), or a bundle outside XTAG_BUNDLE_ROOT",
            404: "no bundle there (not-a-bundle)",
            409: "this model is already loading, or a multi-worker server",
            415: "not application/json",
            422: "invalid name or field, the bundle did not load or warm up (a new name is then not kept), or "
            "XTAG_MAX_MEMORY_MB would be exceeded",
            **LIMITED,
        }
    ),
)
async def put_model(request: Request, name: str, body: ModelPutBody) -> dict:
    single_worker(request, "loading a model over HTTP")
    try:
        ModelSpec(name=name, path=body.bundle)
    except ValueError as exc:
        raise Problem(422, "validation-error", str(exc.errors()[0]["ctx"]["error"])) from None
    return await _load(request, name, resolve_target(request, body.bundle))


@router.delete(
    "/v1/admin/models/{name}",
    status_code=204,
    summary="Stop serving one model (the default only with ?new_default=NAME); requests already on it finish; "
    "SIGHUP brings a configured model back",
    responses=problem_responses(
        {**COMMON, **NAMED, 409: "the default model without a new_default, or a multi-worker server"}
    ),
)
async def delete_model(
    request: Request, name: str, registry: ModelRepositoryDep, new_default: str | None = None
) -> None:
    single_worker(request, "unloading a model over HTTP")
    slot_or_404(request, name)
    try:
        registry.unload(name, new_default)
    except UnknownModel as exc:
        raise Problem(404, "unknown-model", str(exc), models=registry.names) from None
    except DefaultModelBusy as exc:
        raise Problem(409, "default-model", str(exc)) from None
