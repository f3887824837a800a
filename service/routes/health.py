"""GET /health (the process answers), /ready (a warmed-up model serves) and /metrics (Prometheus); always open."""

from __future__ import annotations

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.responses import Response

from service.problems import problem_response

router = APIRouter(tags=["operations"])


@router.get("/health", summary="Liveness: 200 while the process serves HTTP")
async def health() -> dict:
    return {"status": "ok"}


@router.get(
    "/ready",
    summary="Readiness: 200 once the bundle is loaded and a warm-up prediction succeeded, else 503",
    responses={503: {"description": "not ready", "content": {"application/problem+json": {}}}},
)
async def ready(request: Request):
    registry = request.app.state.registry
    model = registry.current
    if model is None:
        why = registry.last_error or ("loading the bundle" if registry.loading else "no bundle loaded")
        return problem_response(503, "not-ready", f"not ready: {why}", request.url.path, {"Retry-After": "1"})
    return {"status": "ready", "model": model.ref, "warmup_ms": round(model.warmup_ms, 3)}


@router.get("/metrics", summary="Prometheus exposition", response_class=Response)
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
