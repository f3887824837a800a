"""GET /v1/models and /v1/models/{name}: every model of the server (or one), its state, what it costs, its versions
and the traffic between them; /v1/models/{name}/ready is in health.py."""

from __future__ import annotations

from fastapi import APIRouter
from xtag.service.deps import ModelRepositoryDep
from xtag.service.http.problems import Problem, problem_responses

router = APIRouter(tags=["model"])


@router.get(
    "/v1/models",
    summary="The models served: name, family, version, label count, memory, loaded at, state",
    description="`state` is loading, ready, failed (`error` says why) or unloaded; a model whose reload failed is "
    "ready with the old bundle and its `error`; one whose bundle files changed on disk since it was loaded is failed (`error` "
    "names the file) while it still answers from its private copy, until it is reloaded. `memory_bytes` is the size of the bundle's files, which its "
    "arrays are mapped from: what it adds to the process at most. `default` marks the model /v1/predict answers. "
    "`versions` lists each version (its state, weight and bundle) and `traffic` the split in force: its weights, "
    "the stable version and where a rollback goes.",
    responses=problem_responses({401: "missing API key"}),
)
async def list_models(registry: ModelRepositoryDep) -> dict:
    return {"default": registry.default, "models": registry.describe()}


@router.get(
    "/v1/models/{name}",
    summary="One model: as in GET /v1/models, with its versions and the traffic between them",
    responses=problem_responses({401: "missing API key", 404: "no model of that name is served"}),
)
async def get_model(name: str, registry: ModelRepositoryDep) -> dict:
    entry = next((e for e in registry.describe() if e["name"] == name and e["state"] != "unloaded"), None)
    if entry is None:
        raise Problem(404, "unknown-model", f"no model named {name!r} is served", models=registry.names)
    return entry
