"""POST /v1/admin/reload: load a bundle beside the served one and switch only if it loads and warms up."""

from __future__ import annotations

import os
import signal
import time

from fastapi import APIRouter, Depends, Request

from models.errors import XtagError
from service.deps import json_body, openapi_body
from service.problems import Problem
from service.schemas import ReloadRequest, ReloadResponse

router = APIRouter(tags=["admin"])
SUPERVISOR_ENV = "XTAG_UVICORN_SUPERVISOR_PID"  # set by service.server.serve for multi-worker runs


async def reload_model(request_app, bundle: str | None = None) -> dict:
    """Shared by the route and SIGHUP: returns the reload summary; raises XtagError and keeps the old model."""
    start = time.perf_counter()
    state = request_app.state
    try:
        old, new = await state.registry.load(bundle)
    except XtagError:
        state.metrics.reloads.labels("failed").inc()
        raise
    state.metrics.reloads.labels("ok").inc()
    status = "unchanged" if old is not None and old.bundle.version == new.bundle.version else "reloaded"
    return {
        "status": status,
        "model": new.ref,
        "previous": old.ref if old else None,
        "took_ms": round((time.perf_counter() - start) * 1e3, 3),
    }


@router.post(
    "/v1/admin/reload",
    response_model=ReloadResponse,
    openapi_extra=openapi_body(ReloadRequest, False),
    summary="Reload the bundle (or switch to another); the old one keeps serving if the new one fails",
    responses={
        409: {"description": "bundle switch asked of a multi-worker server"},
        422: {"description": "the new bundle did not load or warm up; the old one still serves"},
    },
)
async def reload(request: Request, body: ReloadRequest = Depends(json_body(ReloadRequest, optional=True))) -> dict:
    settings = request.app.state.settings
    if body.bundle is not None and settings.workers > 1:
        raise Problem(
            409,
            "multi-worker",
            "switching to another bundle path needs a single worker; with several, "
            "update the configured path (XTAG_BUNDLE) and restart, or reload it in place",
        )
    try:
        summary = await reload_model(request.app, body.bundle)
    except XtagError as exc:
        current = request.app.state.registry.current
        still = f"; still serving {current.ref['name']} {current.ref['version']}" if current else ""
        raise Problem(422, "reload-failed", f"{exc}{still}") from exc
    if os.environ.get(SUPERVISOR_ENV) == str(os.getppid()):  # roll every sibling worker onto it (uvicorn SIGHUP)
        os.kill(os.getppid(), signal.SIGHUP)
    return summary
