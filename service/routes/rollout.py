"""The admin plane of a model's versions: PUT /v1/admin/models/{name}/traffic, POST .../promote and .../rollback.

Fenced as the other admin routes are (routes/model_admin.py): the admin credential, JSON bodies only, and a single
worker (each worker holds its own traffic: with several, change models.toml and restart). Each change takes effect
at the next request, is refused whole when it cannot be made (the traffic in force stays), and is logged and
counted (service/rollout/traffic.py; xtag_traffic_changes).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from xtag.service.deps import ModelRepositoryDep, PromoteBody, RollbackBody, TrafficBody, openapi_body
from xtag.service.http.problems import Problem, problem_responses
from xtag.service.rollout.traffic import Traffic, TrafficChange, TrafficRefused
from xtag.service.routes.model_admin import COMMON, NAMED, single_worker, slot_or_404
from xtag.service.schemas import PromoteRequest, RollbackRequest, TrafficRequest, TrafficResponse
from xtag.service.state.model_repository import ModelRepository

router = APIRouter(tags=["admin"])
CHANGE = {
    **COMMON,
    **NAMED,
    400: "invalid JSON or UTF-8",
    409: "a version given traffic is not ready (it failed or still loads), a rollout policy holds the traffic, "
    "nothing to roll back to, or a multi-worker server",
    415: "not application/json",
}


def traffic_of(request: Request, registry: ModelRepository, name: str) -> Traffic:
    """The served model's Traffic (404 for a name not served)."""
    slot_or_404(request, name)
    return registry.traffic[name]


def answer(traffic: Traffic, change: TrafficChange | None = None) -> dict:
    return {"model": traffic.model, "action": None if change is None else change.action, **traffic.describe()}


def change(request: Request, registry: ModelRepository, name: str, make) -> dict:
    """Make a change of model `name`'s traffic; its refusal as problem+json (the traffic in force unchanged)."""
    single_worker(request, "changing a model's traffic over HTTP")
    traffic = traffic_of(request, registry, name)
    try:
        made = make(traffic)
    except TrafficRefused as exc:
        raise Problem(exc.status, exc.code, str(exc), **answer(traffic)) from None
    return answer(traffic, made)


@router.get(
    "/v1/admin/models/{name}/traffic",
    response_model=TrafficResponse,
    summary="The traffic of model NAME between its versions: weights, the stable version, where a rollback goes",
    responses=problem_responses({**COMMON, **NAMED}),
)
async def get_traffic(request: Request, name: str, registry: ModelRepositoryDep) -> dict:
    return answer(traffic_of(request, registry, name))


@router.put(
    "/v1/admin/models/{name}/traffic",
    response_model=TrafficResponse,
    openapi_extra=openapi_body(TrafficRequest),
    summary="Split model NAME's requests between its versions by weight, from the next request on",
    responses=problem_responses(
        {**CHANGE, 422: "invalid field, weights that do not sum to 100, or an unknown version"}
    ),
)
async def put_traffic(request: Request, name: str, registry: ModelRepositoryDep, body: TrafficBody) -> dict:
    return change(request, registry, name, lambda t: t.set_weights(body.weights, reason=body.reason or ""))


@router.post(
    "/v1/admin/models/{name}/promote",
    response_model=TrafficResponse,
    openapi_extra=openapi_body(PromoteRequest),
    summary="Give one version of model NAME all its traffic and make it the stable version",
    responses=problem_responses({**CHANGE, 422: "invalid field, or an unknown version"}),
)
async def promote(request: Request, name: str, registry: ModelRepositoryDep, body: PromoteBody) -> dict:
    return change(request, registry, name, lambda t: t.promote(body.version, reason=body.reason or ""))


@router.post(
    "/v1/admin/models/{name}/rollback",
    response_model=TrafficResponse,
    openapi_extra=openapi_body(RollbackRequest, required=False),
    summary="All of model NAME's traffic back on its stable version at once (or, when it has it all already, on "
    "the previous stable version); ends a rollout policy's hold",
    responses=problem_responses({**CHANGE, 422: "invalid field"}),
)
async def rollback(request: Request, name: str, registry: ModelRepositoryDep, body: RollbackBody) -> dict:
    return change(request, registry, name, lambda t: t.rollback(reason=body.reason or ""))
