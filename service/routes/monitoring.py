"""The built-in page's feeds, per served model: GET /v1/drift (served labels against training labels,
service/observability/drift.py) and GET /v1/timeline (the last hour per endpoint, service/observability/timeline.py).
Without `model`, both describe the default model. GET /v1/shadow: shadow scoring's comparisons (service/state/shadow.py)."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from xtag.service.deps import MODEL_QUERY, ModelRepositoryDep, QueriedModelDep
from xtag.service.http.problems import problem_responses
from xtag.service.observability.prometheus import served_name
from xtag.service.state.shadow import summaries

router = APIRouter(tags=["monitoring"])


@router.get(
    "/v1/drift",
    summary="Label drift of one model: Jensen-Shannon divergence, head/torso/tail shares, top risers and fallers",
    responses=problem_responses(
        {401: "missing API key", 404: "no such model", 503: "no model loaded yet", 422: "invalid query parameter"}
    ),
)
async def drift(
    request: Request,
    served: QueriedModelDep,
    top: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict:
    out = served.drift.summary(served.names, top)
    request.app.state.metrics.publish_drift(served, out)
    return {**out, "model": served.ref}


@router.get(
    "/v1/timeline",
    summary="Time series of the last hour for one model: QPS, latency percentiles, error and 503 rates per "
    "endpoint, batch sizes",
    description='`models` lists the names with a series; `model=""` gives the requests no model answered.',
    responses=problem_responses({401: "missing API key", 422: "invalid query parameter"}),
)
async def timeline(
    request: Request,
    registry: ModelRepositoryDep,
    minutes: Annotated[float, Query(gt=0, le=60)] = 60,
    model: Annotated[str | None, MODEL_QUERY] = None,
) -> dict:
    timelines = request.app.state.timelines
    if model is None:
        current = registry.current
        model = served_name(current) if current is not None else ""
    return {**timelines.series(model, minutes), "model": model, "models": timelines.models()}


@router.get(
    "/v1/shadow",
    summary="Shadow scoring: each shadow's agreement with its primary, and both models' live P@k from feedback",
    description="Per pair: documents compared, shed, unserved and errors, the window's top-1 agreement, overlap@k and rank "
    "correlation, and `live`: each model's P@k on the compared documents whose id the feedback store holds "
    "corrected labels for (absent without a store).",
    responses=problem_responses({401: "missing API key"}),
)
async def shadow(request: Request) -> dict:
    return {"pairs": await anyio.to_thread.run_sync(summaries, request.app)}
