"""The built-in page's feeds: GET /v1/drift (served labels against training labels, service/observability/drift.py) and
GET /v1/timeline (the last hour per endpoint, service/observability/timeline.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from xtag.service.deps import served_model
from xtag.service.http.problems import problem_responses
from xtag.service.state.model_slot import ServedModel

router = APIRouter(tags=["monitoring"])


@router.get(
    "/v1/drift",
    summary="Label drift: Jensen-Shannon divergence, head/torso/tail shares, top risers and fallers",
    responses=problem_responses({401: "missing API key", 503: "no model loaded yet", 422: "invalid query parameter"}),
)
async def drift(
    request: Request,
    model: Annotated[ServedModel, Depends(served_model)],
    top: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict:
    out = model.drift.summary(model.names, top)
    request.app.state.metrics.publish_drift(out)
    return {**out, "model": model.ref}


@router.get(
    "/v1/timeline",
    summary="Time series of the last hour: QPS, latency percentiles, error and 503 rates per endpoint, batch sizes",
    responses=problem_responses({401: "missing API key", 422: "invalid query parameter"}),
)
async def timeline(request: Request, minutes: Annotated[float, Query(gt=0, le=60)] = 60) -> dict:
    return request.app.state.timeline.series(minutes)
