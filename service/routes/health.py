"""GET /health (the process answers), /ready (a warmed-up model serves) and /metrics (Prometheus); always open."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response
from xtag.service.http.problems import problem_response, problem_responses
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
    description="While a model serves, `last_reload_error` says why the latest reload was refused (if it was).",
    responses=problem_responses({503: "not ready; `detail` says why"}),
)
async def ready(request: Request):
    registry = request.app.state.registry
    model = registry.current
    if model is None:
        why = registry.last_error or ("loading the bundle" if registry.loading else "no bundle loaded")
        return problem_response(503, "not-ready", f"not ready: {why}", request.url.path, {"Retry-After": "1"})
    out = {"status": "ready", "model": model.ref, "warmup_ms": round(model.warmup_ms, 3)}
    if registry.last_error:  # the old model still serves; say why the new one was refused
        out["last_reload_error"] = registry.last_error
    return out


@router.get("/metrics", summary="Prometheus exposition", response_class=Response)
async def metrics(request: Request) -> Response:
    state = request.app.state
    model = state.registry.current
    if model is not None and model.drift is not None:  # computed when read: O(labels), not per request
        state.metrics.publish_drift(model, model.drift.summary(model.names, top=0))
    if state.shadows:  # live P@k reads the feedback store: off the loop, and only with a shadow declared
        await anyio.to_thread.run_sync(summaries, request.app)
    return Response(state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
