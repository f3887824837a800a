"""GET /v1/models: every model of the server, its state and what it costs; /v1/models/{name}/ready is in health.py."""

from __future__ import annotations

from fastapi import APIRouter
from xtag.service.deps import ModelRepositoryDep
from xtag.service.http.problems import problem_responses

router = APIRouter(tags=["model"])


@router.get(
    "/v1/models",
    summary="The models served: name, family, version, label count, memory, loaded at, state",
    description="`state` is loading, ready, failed (`error` says why), idle (XTAG_EVICT=lru: not in memory, loaded "
    "on its next prediction request) or unloaded, and `loaded` whether it is in memory now; a model whose reload failed is "
    "ready with the old bundle and its `error`; one whose bundle files changed on disk since it was loaded is failed (`error` "
    "names the file) while it still answers from its private copy, until it is reloaded. `memory_bytes` is the size of the bundle's files, which its "
    "arrays are mapped from: what it adds to the process at most. `default` marks the model /v1/predict answers.",
    responses=problem_responses({401: "missing API key"}),
)
async def list_models(registry: ModelRepositoryDep) -> dict:
    return {"default": registry.default, "models": registry.describe()}
