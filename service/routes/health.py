"""GET /health (the process answers), /ready (a warmed-up model serves) and /metrics (Prometheus); always open."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response
from xtag.service.deps import ModelRepositoryDep
from xtag.service.http.problems import problem_response, problem_responses
from xtag.service.state.model_repository import UnknownModel
from xtag.service.state.shadow import summaries

router = APIRouter(tags=["operations"])


@router.get("/health", summary="Liveness: 200 while the process serves HTTP")
async def health() -> dict:
    return {"status": "ok"}


# HEAD too (load balancers probe with it); kept out of the schema, which would list the operation twice
router.add_api_route("/health", health, methods=["HEAD"], include_in_schema=False)


@router.get(
    "/ready",
    summary="Readiness: 200 once the bundle is loaded and a warm-up prediction succeeded, else 503",
    description="While a model serves, `last_reload_error` says why the latest reload was refused (if it was). A "
    "model whose bundle files changed on disk since it was loaded is not ready (it still answers from its private "
    "copy) until it is reloaded.",
    responses=problem_responses({503: "not ready; `detail` says why"}),
)
async def ready(request: Request, registry: ModelRepositoryDep):
    model = registry.current
    several = len(registry.slots) > 1
    changed = registry.default_slot.changed if model is not None else None
    if model is None or changed:
        why = changed or registry.last_error or ("loading the bundle" if registry.loading else "no bundle loaded")
        named = f"model {registry.default}: " if several else ""
        return problem_response(
            503,
            "not-ready",
            f"not ready: {named}{why}",
            request.url.path,
            {"Retry-After": "1"},
            **(_states(registry) if several else {}),
        )
    out = {"status": "ready", "model": model.ref, "warmup_ms": round(model.warmup_ms, 3)}
    if registry.last_error:  # the old model still serves; say why the new one was refused
        out["last_reload_error"] = registry.last_error
    if several:
        out.update(_states(registry))
    return out


def _states(registry) -> dict:
    """Each model's state and, for those that failed (or whose reload failed), why, by name."""
    models = {name: slot.state for name, slot in registry.slots.items()}
    errors = {name: slot.error for name, slot in registry.slots.items() if slot.error}
    return {"models": models, "errors": errors}


@router.get(
    "/v1/models/{name}/ready",
    summary="Readiness of one model: 200 once it is loaded and warmed up, or idle (XTAG_EVICT=lru: it loads on its "
    "next request), else 503 (404: no such model)",
    responses=problem_responses({404: "no model of that name is served", 503: "not ready; `detail` says why"}),
)
async def model_ready(request: Request, name: str, registry: ModelRepositoryDep):
    try:
        slot = registry.slot(name)
    except UnknownModel as exc:
        return problem_response(404, "unknown-model", str(exc), request.url.path, models=registry.names)
    model = slot.current
    if slot.state == "idle":  # XTAG_EVICT=lru: it takes requests, and loads on the next one
        return {"status": "idle"}
    changed = slot.changed if model is not None else None
    if model is None or changed:
        why = changed or slot.last_error or "loading the bundle"
        return problem_response(
            503, "not-ready", f"model {name} not ready: {why}", request.url.path, {"Retry-After": "1"}
        )
    out = {"status": "ready", "model": model.ref, "warmup_ms": round(model.warmup_ms, 3)}
    if slot.last_error:
        out["last_reload_error"] = slot.last_error
    return out


@router.get("/metrics", summary="Prometheus exposition", response_class=Response)
async def metrics(request: Request, registry: ModelRepositoryDep) -> Response:
    state = request.app.state
    for slot in list(registry.slots.values()):  # each model's drift, computed when read: O(labels)
        model = slot.current
        if model is not None and model.drift is not None:
            state.metrics.publish_drift(model, model.drift.summary(model.names, top=0))
    if state.shadows:  # live P@k reads the feedback store: off the loop, and only with a shadow declared
        await anyio.to_thread.run_sync(summaries, request.app)
    return Response(state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
