"""The automatic rollout of a model's version: POST /v1/admin/models/{name}/rollout starts a policy, GET shows it.

Fenced as the other admin routes are (routes/model_admin.py): the admin credential, JSON bodies only, a single
worker (a rollout judges the answers of the process it runs in). The policy then runs on its own
(service/rollout/policy.py): `POST .../rollback` (routes/rollout.py) ends it at once.
"""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Request
from xtag.config.rollout_policy import RolloutPolicy
from xtag.service.deps import RolloutBody, openapi_body
from xtag.service.http.problems import Problem, problem_responses
from xtag.service.rollout.policy import RolloutConflict, RolloutRefused
from xtag.service.routes.model_admin import COMMON, NAMED, single_worker, slot_or_404
from xtag.service.schemas import RolloutResponse
from xtag.service.state.shadow import rollout_figures

router = APIRouter(tags=["admin"])


@router.post(
    "/v1/admin/models/{name}/rollout",
    response_model=RolloutResponse,
    status_code=202,
    openapi_extra=openapi_body(RolloutPolicy),
    summary="Roll one version of model NAME out by a policy: steps of its traffic, each held while the gates hold; "
    "rolled back at once when a gate fails",
    responses=problem_responses(
        {
            **COMMON,
            **NAMED,
            400: "invalid JSON or UTF-8",
            409: "a rollout of this model is running (roll it back first), or a multi-worker server",
            415: "not application/json",
            422: "invalid policy, an unknown version, the stable version itself, or shadow gates for a version that "
            "did not shadow the model",
        }
    ),
)
async def start_rollout(request: Request, name: str, body: RolloutBody) -> dict:
    single_worker(request, "a rollout over HTTP")
    slot_or_404(request, name)
    shadow = None
    if body.gates.shadow_gated:
        shadow = await anyio.to_thread.run_sync(rollout_figures, request.app, name, body.version)
    try:
        return request.app.state.rollouts.start(name, body, shadow).as_json()
    except RolloutConflict as exc:
        raise Problem(409, "rollout-in-progress", str(exc)) from None
    except RolloutRefused as exc:
        raise Problem(422, "rollout-refused", str(exc)) from None


@router.get(
    "/v1/admin/models/{name}/rollout",
    response_model=RolloutResponse,
    summary="Model NAME's latest rollout: its state, step, the gates' last judgement, why it ended",
    responses=problem_responses({**COMMON, 404: "no model of that name, or it never had a rollout"}),
)
async def get_rollout(request: Request, name: str) -> dict:
    slot_or_404(request, name)
    found = request.app.state.rollouts.by_model.get(name)
    if found is None:
        raise Problem(404, "no-rollout", f"model {name}: no rollout since the server started")
    return found.as_json()
