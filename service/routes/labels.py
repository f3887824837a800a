"""GET /v1/labels (paged, searchable), /v1/model and /v1/stats: what the model knows and how it is doing."""

from __future__ import annotations

import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Path, Query, Request
from xtag.models.label_text.model import FusedModel
from xtag.models.label_texts import LabelText
from xtag.service.deps import ModelRepositoryDep, ServedModelDep
from xtag.service.http.problems import Problem, problem_responses
from xtag.service.schemas import LabelsPage, ModelInfo, RelatedLabels
from xtag.service.state.model_slot import ServedModel

router = APIRouter(tags=["model"])
AUTH_AND_MODEL = {401: "missing API key", 503: "no model loaded yet"}
QUERY = {422: "invalid query parameter"}
WINDOWS_ABSOLUTE = re.compile(r"^[A-Za-z]:[\\/]|^\\\\")


def _public(value):
    """`value` with every absolute filesystem path cut to its last part: the manifest records where the
    bundle was built from (the training corpus, the run folder), which is nobody's business but the
    operator's."""
    if isinstance(value, dict):
        return {k: _public(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_public(v) for v in value]
    if isinstance(value, str):
        if value.startswith("/") and "\n" not in value:
            return PurePosixPath(value).name
        if WINDOWS_ABSOLUTE.match(value):
            return PureWindowsPath(value).name
    return value


@router.get(
    "/v1/labels",
    response_model=LabelsPage,
    response_model_exclude_unset=True,  # a label's label-file fields only where the bundle says them
    summary="Labels, paged, optionally filtered; with what the bundle's label file says of each",
    responses=problem_responses({**AUTH_AND_MODEL, **QUERY}),
)
async def labels(
    model: ServedModelDep,
    q: Annotated[
        str | None,
        Query(max_length=200, description="case-insensitive substring of the id, or of the name or another name"),
    ] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> dict:
    ids = range(model.n_labels) if not q else [i for i, n in enumerate(model.search_texts) if q.lower() in n]
    page = ids[offset : offset + limit]
    freqs = model.bundle.predictor.vocab.frequencies
    texts = model.label_texts
    return {
        "total": len(ids),
        "offset": offset,
        "limit": limit,
        "labels": [
            {
                "id": i,
                "name": model.names[i],
                "frequency": freqs[i],
                **({} if texts is None else _text_fields(texts.get(model.names[i]))),
            }
            for i in page
        ],
    }


def _text_fields(label: LabelText | None) -> dict:
    """What the label file says of a label, without the fields it leaves out."""
    if label is None:
        return {}
    row = label.as_json()
    del row["id"]
    if "name" in row:
        row["label"] = row.pop("name")
    return row


@router.get(
    "/v1/labels/{label}/related",
    response_model=RelatedLabels,
    summary="The labels nearest to one label by text (the label-text stage's index)",
    responses=problem_responses(
        {**AUTH_AND_MODEL, **QUERY, 404: "no such label", 409: "the model has no label-text stage"}
    ),
)
async def related(
    model: ServedModelDep,
    label: Annotated[int, Path(description="the label's id (its position in the vocabulary)")],
    k: Annotated[int, Query(ge=1, le=100)] = 10,
) -> dict:
    """For tag-suggestion UIs and item-to-item recommendation: the k labels whose texts embed nearest."""
    fused = model.bundle.predictor.model
    if getattr(fused, "reranks", False):  # a re-ranker (LaMP): the index is its first stage's
        fused = fused.first.model
    if not 0 <= label < model.n_labels:
        raise Problem(404, "unknown-label", f"label {label} is not one of the model's {model.n_labels} labels")
    if not isinstance(fused, FusedModel):
        raise Problem(
            409, "no-label-text-stage", "this model was trained without label texts (xtag train --labels): no index"
        )
    near = fused.related(label, k)
    return {
        "id": label,
        "name": model.names[label],
        "related": [
            {"id": int(j), "name": model.names[j], "score": float(s)} for j, s in zip(near.labels[0], near.scores[0])
        ],
    }


def model_info(model: ServedModel) -> dict:
    b = model.bundle
    return {
        "name": b.name,
        "version": b.version,
        "kind": model.kind,
        "path": b.path.name,
        "label_count": model.n_labels,
        "default_beam_size": model.default_beam,
        "load_seconds": round(b.load_seconds, 4),
        "warmup_ms": round(model.warmup_ms, 3),
        "loaded_at": model.loaded_at,
        "manifest": _public(b.manifest),
        "runtime": b.runtime,
    }


@router.get(
    "/v1/model",
    response_model=ModelInfo,
    summary="The served bundle: manifest, label count, load time (no server paths)",
    responses=problem_responses(AUTH_AND_MODEL),
)
async def model(model: ServedModelDep) -> dict:
    return model_info(model)


@router.get(
    "/v1/stats",
    summary="Rolling QPS, latency percentiles, error rate and top labels (dashboard feed)",
    responses=problem_responses({401: "missing API key", **QUERY}),
)
async def stats(request: Request, registry: ModelRepositoryDep, top: Annotated[int, Query(ge=1, le=100)] = 10) -> dict:
    model, recent = registry.current, request.app.state.recent
    out = recent.summary()
    out["in_flight"] = recent.in_flight
    out["top_labels"] = []
    out["model"] = None
    if model is not None:
        counts = model.predicted
        best = np.argsort(-counts, kind="stable")[:top]
        out["top_labels"] = [
            {"id": int(j), "name": model.names[j], "count": int(counts[j])} for j in best if counts[j] > 0
        ]
        out["model"] = {
            **model.ref,
            "kind": model.kind,
            "label_count": model.n_labels,
            "load_seconds": round(model.bundle.load_seconds, 4),
        }
    return out
