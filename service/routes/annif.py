"""Annif's REST contract (projects, suggest, suggest-batch), one project per loaded bundle, for unchanged Annif clients."""

from __future__ import annotations

import asyncio
import re
from functools import partial
from importlib import metadata
from urllib.parse import parse_qsl

import orjson
from fastapi import APIRouter, Request
from starlette.formparsers import MultiPartException, MultiPartParser
from xtag.models.inference.label_filter import search_width
from xtag.service.deps import (
    OFF_LOOP_BYTES,
    AnnifProjectDep,
    ModelRepositoryDep,
    SettingsDep,
    check_text_lengths,
    document_limit,
    openapi_body,
    parse_body,
)
from xtag.service.http.cost import METER_KEY, Work, check_work
from xtag.service.http.problems import Problem, problem_responses
from xtag.service.routes.predict import answer, off_loop_if_large, predict_arrays, request_filters
from xtag.service.schemas import AnnifBatchRequest, LabelFilterFields
from xtag.service.state.model_slot import ServedModel
from xtag.service.state.shadow import JOB_KEY

router = APIRouter(tags=["annif"])
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
PROJECT = {401: "missing API key", 404: "no such project", 503: "no model loaded yet"}
ANNIF_FILTER = (
    "xtag extension: labels separated by whitespace, each its URI or its name; `exclude`: never returned, `include`: "
    "only these (as /v1/predict's exclude and include, branches included); unknown labels get 422"
)


def too_many_fields(count: int | str, limit: int) -> Problem:
    return Problem(413, "too-many-fields", f"the form has {count} fields; the limit is {limit} (XTAG_MAX_FORM_FIELDS)")


class StrictMultiPartParser(MultiPartParser):
    """Starlette's multipart parser, but a text field that is not valid in its charset is a 400 (the
    stock parser silently decodes it as latin-1, and the text predicted would not be the one sent), and
    more than `max_fields` parts, files included, is a 413 that names XTAG_MAX_FORM_FIELDS."""

    def __init__(self, headers, stream, max_fields: int):
        super().__init__(headers, stream, max_files=max_fields, max_fields=max_fields)
        self.parts = 0

    def on_headers_finished(self) -> None:
        self.parts += 1
        if self.parts > self.max_fields:
            raise too_many_fields(f"more than {self.max_fields}", self.max_fields)
        super().on_headers_finished()

    def on_part_end(self) -> None:
        part = self._current_part
        if part.file is None:
            try:
                bytes(part.data).decode(self._charset or "utf-8")
            except (UnicodeDecodeError, LookupError) as exc:
                where = f" at byte {exc.start}" if isinstance(exc, UnicodeDecodeError) else ""
                raise Problem(
                    400,
                    "bad-request",
                    f"form field {part.field_name!r} is not valid {(self._charset or 'utf-8').upper()}{where}",
                ) from None
        super().on_part_end()


def project_id(model: ServedModel) -> str:
    """The model's served name (already URL-safe: config/model_set.py)."""
    return model.served_as or re.sub(r"[^A-Za-z0-9_-]+", "-", model.bundle.name).strip("-") or "xtag"


def project(request: Request, model: ServedModel) -> dict:
    return {
        "project_id": project_id(model),
        "name": model.bundle.name,
        "language": request.app.state.settings.server.annif_language,
        "backend": {"backend_id": f"xtag-{model.kind}"},
        "is_trained": True,
        "modification_time": model.bundle.manifest.get("created"),
    }


def _number(raw: str | None, name: str, cast, lo: float, hi: float, default):
    if raw is None or raw == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise Problem(400, "bad-request", f"{name}: {raw!r} is not a valid {cast.__name__}") from None
    if not lo <= value <= hi:
        raise Problem(400, "bad-request", f"{name}: {value} is outside {lo}..{hi}")
    return value


def _labels(raw: str | None, prefix: str) -> list[str] | None:
    """An `exclude`/`include` option: labels separated by whitespace, each its URI (as results give it) or its
    name; absent or empty: no filter."""
    if raw is None or not raw.strip():
        return None
    return [ref.removeprefix(prefix) if prefix and ref.startswith(prefix) else ref for ref in raw.split()]


async def _suggest(
    request: Request,
    model: ServedModel,
    texts: list[str],
    limit_raw,
    threshold_raw,
    ids: list | None = None,
    exclude_raw: str | None = None,
    include_raw: str | None = None,
) -> list:
    """Annif semantics: limit (default 10) and threshold (default 0) filter; blank texts get no results. A shadowed
    model's request is left for its shadow (routes/predict.py shadow_task), `ids` the documents' for live P@k.
    xtag's `exclude` and `include` (whitespace-separated URIs or names) filter as /v1/predict's do."""
    s = request.app.state.settings
    limit = min(_number(limit_raw, "limit", int, 1, s.limits.max_k, 10), model.n_labels)
    threshold = _number(threshold_raw, "threshold", float, 0.0, 1.0, 0.0)
    check_text_lengths(request, texts)
    todo = [i for i, t in enumerate(texts) if t.strip()]
    out: list = [[] for _ in texts]
    prefix = s.server.annif_uri_prefix
    asked = LabelFilterFields(exclude=_labels(exclude_raw, prefix), include=_labels(include_raw, prefix))
    filters = request_filters(model, s.limits.max_filter_labels, asked, len(todo))
    if not todo:
        return out
    beam, fetch, one_by_one = model.default_beam, 0, 0
    if filters is not None:
        fetch, one_by_one, beam = search_width(
            filters, limit, beam, model.n_labels, model.bundle.predictor.scores_labels
        )
    work = Work(
        documents=len(todo),
        characters=sum(len(texts[i]) for i in todo),
        k=limit,
        beam=beam,
        level_nodes=model.level_nodes,
        hint=model.cost_hint,
        annif=True,
        fetch=fetch,
        scored_labels=one_by_one,
    )
    # an Annif result holds the id (its uri), the label's name and the uri's prefix: at most two label objects' bytes
    per_label = model.label_bytes + model.shown_bytes + len(s.server.annif_uri_prefix.encode())
    request.scope[METER_KEY] = check_work(
        work, per_label, s.limits.max_request_cost, s.limits.max_response_bytes, s.limits.max_request_memory_mb
    )
    preds = await predict_arrays(request, model, [texts[i] for i in todo], limit, None, None, filters=filters)
    if model.shadow is not None and filters is None:
        scored = [texts[i] for i in todo]
        doc_ids = [None] * len(todo) if ids is None else [ids[i] for i in todo]
        request.scope[JOB_KEY] = model.shadow.job(scored, doc_ids, limit, None, True, model, preds.labels)
    results = partial(annif_results, preds, model.names, model.shown_names, s.server.annif_uri_prefix, threshold)
    rows = await off_loop_if_large(request, results, len(todo) * limit)
    for i, row in zip(todo, rows):
        out[i] = row
    return out


def annif_results(preds, names: list[str], shown: list[str], prefix: str, threshold: float) -> list[orjson.Fragment]:
    """Each document's Annif results, as JSON: {uri, label, notation, score}, scores under `threshold` dropped. The
    uri is the label's id (`names`) after the prefix, the label its name (`shown`: from the bundle's label file, else
    the id), as Annif shows a subject's label."""
    return [
        orjson.Fragment(
            orjson.dumps(
                [
                    {"uri": prefix + names[j], "label": shown[j], "notation": None, "score": score}
                    for j, score in zip(ids, scores)
                    if j >= 0 and score >= threshold
                ]
            )
        )
        for ids, scores in zip(preds.labels.tolist(), preds.scores.tolist())
    ]


async def _form(request: Request, content_type: str) -> dict[str, str]:
    """The form's fields; a body that is not UTF-8 is a 400, as for the JSON endpoints (Starlette's
    parsers would silently replace the bytes, and the text predicted would not be the one sent).

    At most XTAG_MAX_FORM_FIELDS fields (413), counted before they are parsed: a 2 MB url-encoded body holds
    250,000 of them, whose parsing held the event loop for 0.2-1.6 s (issue 38). A url-encoded body over
    64 KiB is decoded in the parse thread, as JSON bodies are (deps.parse_body); the multipart parser reads
    the body as a stream on the loop, in bounded steps: a part at a time, at most the field limit of them."""
    limit = request.app.state.settings.limits.max_form_fields
    if content_type != FORM_TYPES[0]:
        try:
            form = await StrictMultiPartParser(request.headers, request.stream(), limit).parse()
        except MultiPartException as exc:
            raise Problem(400, "bad-request", f"invalid multipart form: {exc.message}") from None
        fields: dict[str, str] = {}
        for name, value in form.multi_items():  # the last value wins, as for url-encoded forms
            if isinstance(value, str):
                fields[name] = value
            else:  # a file part is not a text field; close its spooled file now
                await value.close()
        return fields
    raw = await request.body()
    fields = raw.count(b"&") + 1 if raw else 0  # parse_qsl splits on "&" only
    if fields > limit:
        raise too_many_fields(fields, limit)
    if len(raw) <= OFF_LOOP_BYTES:
        return _url_encoded(raw)
    return await asyncio.get_running_loop().run_in_executor(request.app.state.parse_executor, _url_encoded, raw)


def _url_encoded(raw: bytes) -> dict[str, str]:
    try:
        return dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True, encoding="utf-8", errors="strict"))
    except UnicodeDecodeError as exc:
        raise Problem(400, "bad-request", f"form body is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


@router.get("/v1/", summary="API information (Annif)", responses=problem_responses({401: "missing API key"}))
async def api_info() -> dict:
    try:
        version = metadata.version("xtag")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {"title": "xtag REST API (Annif-compatible)", "version": version}


@router.get(
    "/v1/projects",
    summary="Annif projects: one per model served",
    responses=problem_responses({401: "missing API key"}),
)
async def projects(request: Request, registry: ModelRepositoryDep) -> dict:
    slots = registry.slots.values()
    return {"projects": [project(request, slot.current) for slot in slots if slot.current is not None]}


@router.get("/v1/projects/{project_id}", summary="One Annif project", responses=problem_responses(PROJECT))
async def get_project(request: Request, model: AnnifProjectDep) -> dict:
    return project(request, model)


@router.post(
    "/v1/projects/{project_id}/suggest",
    summary="Annif suggest (form-encoded text, limit, threshold; xtag's exclude, include)",
    responses=problem_responses(
        {
            400: "invalid form, UTF-8, limit or threshold",
            **PROJECT,
            422: "unknown labels in exclude/include, or more than XTAG_MAX_FILTER_LABELS",
            413: "body or text too large, too many form fields, or over XTAG_MAX_REQUEST_COST / XTAG_MAX_RESPONSE_BYTES (too-costly)",
            415: "not a form",
        }
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/x-www-form-urlencoded": {
                    "schema": {
                        "type": "object",
                        "required": ["text"],
                        "properties": {
                            "text": {"type": "string"},
                            "limit": {"type": "integer", "default": 10, "minimum": 1},
                            "threshold": {"type": "number", "default": 0, "minimum": 0, "maximum": 1},
                            "language": {"type": "string"},
                            "exclude": {"type": "string", "description": ANNIF_FILTER},
                            "include": {"type": "string", "description": ANNIF_FILTER},
                        },
                    }
                }
            },
        }
    },
)
async def suggest(request: Request, model: AnnifProjectDep):
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type not in FORM_TYPES:
        raise Problem(
            415,
            "unsupported-media-type",
            f"suggest takes a form ({FORM_TYPES[0]}), got {content_type or 'no Content-Type'}",
        )
    form = await _form(request, content_type)
    text = form.get("text")
    if not isinstance(text, str):
        raise Problem(400, "bad-request", "text: a form field 'text' is required")
    rows = await _suggest(
        request, model, [text], form.get("limit"), form.get("threshold"), None, form.get("exclude"), form.get("include")
    )
    return await answer(request, model, {"results": rows[0]})


@router.post(
    "/v1/projects/{project_id}/suggest-batch",
    openapi_extra={
        **openapi_body(AnnifBatchRequest),
        "parameters": [
            {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "default": 10}},
            {
                "name": "threshold",
                "in": "query",
                "schema": {"type": "number", "minimum": 0, "maximum": 1, "default": 0},
            },
            {"name": "exclude", "in": "query", "schema": {"type": "string"}, "description": ANNIF_FILTER},
            {"name": "include", "in": "query", "schema": {"type": "string"}, "description": ANNIF_FILTER},
        ],
    },
    summary="Annif suggest-batch (JSON documents; limit, threshold as query parameters)",
    responses=problem_responses(
        {
            400: "invalid JSON, UTF-8, limit or threshold, or too many documents",
            **PROJECT,
            413: "body or text too large, or over XTAG_MAX_REQUEST_COST / _MEMORY_MB / XTAG_MAX_RESPONSE_BYTES "
            "(too-costly)",
            415: "not application/json",
            422: "invalid field, unknown labels in exclude/include, or more than XTAG_MAX_FILTER_LABELS",
        }
    ),
)
async def suggest_batch(request: Request, model: AnnifProjectDep, settings: SettingsDep):
    limit = settings.limits.max_batch_documents
    body = await parse_body(request, AnnifBatchRequest, check=document_limit(limit, status=400))
    q = request.query_params
    # Annif's document_id is a string, absent ids come back null; an integer id is echoed as its string (issue 28)
    ids = [None if d.document_id is None else str(d.document_id) for d in body.documents]
    texts = [d.text for d in body.documents]
    rows = await _suggest(
        request, model, texts, q.get("limit"), q.get("threshold"), ids, q.get("exclude"), q.get("include")
    )
    return await answer(request, model, [{"document_id": i, "results": r} for i, r in zip(ids, rows)])
