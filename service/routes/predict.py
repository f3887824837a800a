"""POST /v1/predict and /v1/predict/batch: one predictor call per request (or per micro-batch), JSON built from arrays."""

from __future__ import annotations

import asyncio
import time
from functools import partial

import numpy as np
import orjson
from fastapi import APIRouter, Request
from starlette.background import BackgroundTask
from starlette.responses import Response
from xtag.models.errors import XtagError
from xtag.models.explain.linear import ExplainUnavailable
from xtag.models.inference.label_filter import NO_LABELS, LabelFilter, label_positions, search_width
from xtag.models.inference.macro_optimal import SERVING_MAX_DOCS, predict_optimized, serving_config
from xtag.models.inference.reweighting import gains_of
from xtag.models.inference.stopping import StopFlag
from xtag.models.inference.types import Predictions
from xtag.models.tagging.tagger import labels_per_text
from xtag.service.batching import run_off_loop
from xtag.service.deps import (
    check_text_lengths,
    document_limit,
    openapi_body,
    parse_body,
    require_api_key,
    serving_model,
)
from xtag.service.http.cost import METER_KEY, Work, check_work, too_large
from xtag.service.http.problems import Problem, problem_responses
from xtag.service.http.response_json import LabelPrefixes, label_lists
from xtag.service.rollout.traffic import VERSION_HEADER
from xtag.service.schemas import (
    BatchDocument,
    BatchRequest,
    BatchResponse,
    LabelFilterFields,
    PredictOptions,
    PredictRequest,
    PredictResponse,
    Reweight,
)
from xtag.service.state.model_slot import ServedModel
from xtag.service.state.shadow import JOB_KEY

router = APIRouter(tags=["predict"])
# /predict and /predict/batch are unversioned aliases (the same handlers, auth included), kept out of
# the OpenAPI schema so that it lists each operation once, under its versioned name.
ALIASES = {"/v1/predict": "/predict", "/v1/predict/batch": "/predict/batch"}
# The same handlers again for a model by name: deps.served_model reads {name} from the path (default: the default).
NAMED = {"/v1/predict": "/v1/models/{name}/predict", "/v1/predict/batch": "/v1/models/{name}/predict/batch"}
# ... and for one version of it, pinned (deps.served_model reads {version}; no traffic routing)
PINNED = {
    "/v1/predict": "/v1/models/{name}/versions/{version}/predict",
    "/v1/predict/batch": "/v1/models/{name}/versions/{version}/predict/batch",
}
HOT_ROUTES = (*ALIASES, *ALIASES.values(), *NAMED.values(), *PINNED.values())
ERRORS = problem_responses(
    {
        400: "invalid JSON or UTF-8",
        401: "missing API key",
        413: "body or text too large, or the request would cost more than XTAG_MAX_REQUEST_COST, take more memory "
        "than XTAG_MAX_REQUEST_MEMORY_MB or answer more than XTAG_MAX_RESPONSE_BYTES (too-costly)",
        415: "not application/json",
        422: "invalid field, unknown labels in exclude/include (named in `unknown_labels`), or explain on a bundle "
        "with nothing to explain with (explain-unavailable)",
        503: "no model loaded yet",
    }
)
NAMED_ERRORS = {**ERRORS, **problem_responses({404: "no model of that name is served (the detail lists them)"})}
PINNED_ERRORS = {
    **ERRORS,
    **problem_responses({404: "no model of that name, or no such version of it (the detail lists them)"}),
    503: ERRORS[503] | {"description": "this version is not loaded: still loading, or it failed (the detail says why)"},
}
NAME_PARAMETER = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
VERSION_PARAMETER = {"name": "version", "in": "path", "required": True, "schema": {"type": "string"}}
# every answer names the version that gave it
VERSION_HEADER_DOC = {
    VERSION_HEADER: {
        "description": "the version of the model that answered (`model.served_version` in the body)",
        "schema": {"type": "string"},
    }
}
OK = {200: {"description": "Successful Response", "headers": VERSION_HEADER_DOC}}
ROUTING_PARAMETER = {
    "name": "X-Routing-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "a sticky key (a user, a session): while the model's traffic weights stand, every request "
    "with the same key reaches the same version (default: the first document's id, else a weighted random one)",
}


class JSONBytes(Response):
    media_type = "application/json"

    def render(self, content: object) -> bytes:
        return orjson.dumps(content)


async def answer(request: Request, model: ServedModel, content: object) -> Response:
    """The handler's JSON response once the work is done (checked by `respond`). The label lists are already
    JSON (orjson.Fragment, built in the worker that predicted or explained): encoding joins them, which for an
    answer of megabytes still takes ms, so a large one is joined in a worker too."""
    meter = request.scope.get(METER_KEY)
    labels = 0 if meter is None else meter.work.documents * meter.work.k
    body = await off_loop_if_large(request, partial(orjson.dumps, content), labels)
    return respond(request, model, body)


def respond(
    request: Request,
    model: ServedModel,
    body: bytes,
    media_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Response:
    """An encoded answer (JSON, or the Open Inference Protocol's, routes/oip.py): its cost estimate checked
    (check_cost), its size held to XTAG_MAX_RESPONSE_BYTES (413 too-costly), the shadow's turn run after it."""
    check_cost(request, model)
    limit = request.app.state.settings.limits.max_response_bytes
    if limit and len(body) > limit:
        raise too_large(len(body), limit, "send fewer documents, a smaller k, or no explain")
    headers = {**(headers or {}), VERSION_HEADER: model.served_version}  # which version answered (rollout/traffic.py)
    return Response(body, media_type=media_type, headers=headers, background=shadow_task(request))


def check_options(
    request: Request,
    model: ServedModel,
    opts: PredictOptions,
    texts: list[str],
    what: str,
    documents: list[BatchDocument] | None = None,
) -> tuple[int, int | None, np.ndarray | None, list[LabelFilter | None] | None]:
    """Limits that depend on the settings or the model: text length (413), k and beam (422), reweighting, label
    filters (422), and what the whole request would cost (413 too-costly, service/http/cost.py), all before any
    prediction."""
    s = request.app.state.settings
    check_text_lengths(request, texts, what)
    try:  # `xtag predict --k` applies the same rule (models/tagging/tagger.py)
        k = labels_per_text(opts.k if "k" in opts.model_fields_set else None, model.n_labels, s.limits.max_k)
    except XtagError as exc:
        raise Problem(422, "validation-error", str(exc)) from exc
    if opts.beam_size is not None and opts.beam_size > s.limits.max_beam_size:
        raise Problem(
            422,
            "validation-error",
            f"beam_size: {opts.beam_size} is above the maximum of {s.limits.max_beam_size} (XTAG_MAX_BEAM_SIZE)",
        )
    try:
        a = reweight_gains(model, opts.reweight)
    except XtagError as exc:
        raise Problem(422, "validation-error", str(exc)) from exc
    if opts.explain:
        try:
            model.explainer  # noqa: B018  (made here, so that an unexplainable bundle is refused before predicting)
        except ExplainUnavailable as exc:
            raise Problem(422, "explain-unavailable", f"explain: {model.bundle.name} ({model.kind}): {exc}") from exc
    beam = opts.beam_size or model.default_beam
    filters = request_filters(model, s.limits.max_filter_labels, opts, len(texts), documents)
    fetch = scored = 0
    if filters is not None:
        if getattr(opts, "optimize", None) is not None:
            raise Problem(422, "validation-error", "exclude/include and optimize are alternatives: give one of them")
        fetch, scored, beam = search_width(filters, k, beam, model.n_labels, model.bundle.predictor.scores_labels)
    work = Work(
        documents=len(texts),
        characters=sum(map(len, texts)),
        k=k,
        beam=beam,
        level_nodes=model.level_nodes,
        explain=opts.explain,
        reweight=a is not None,
        optimize=getattr(opts, "optimize", None) is not None,
        hint=model.cost_hint,
        fetch=fetch,
        scored_labels=scored,
    )
    per_label = model.label_bytes + (model.text_bytes if opts.label_text else 0)
    request.scope[METER_KEY] = check_work(
        work, per_label, s.limits.max_request_cost, s.limits.max_response_bytes, s.limits.max_request_memory_mb
    )
    return k, opts.beam_size, a, filters


def json_safe(ref: int | str) -> int | str:
    """A label reference as the answer can echo it: an integer beyond 64 bits (which JSON encoders refuse) as its
    digits."""
    return ref if isinstance(ref, str) or -(2**63) <= ref < 2**64 else str(ref)


def request_filters(
    model: ServedModel,
    limit: int,
    request: LabelFilterFields,
    n: int,
    documents: list[BatchDocument] | None = None,
    where: str = "",
) -> list[LabelFilter | None] | None:
    """Each document's label filter (models/inference/label_filter.py), None when nothing filters: the request's
    `exclude` and `include`, and a batch document's own (its exclude adds to the request's, its include replaces
    it). Labels are resolved with their branches when the bundle has label texts (label_positions). 422 names
    every unknown label, and a document whose filter names more than `limit` labels (XTAG_MAX_FILTER_LABELS)."""
    own = [d for d in documents or () if d.exclude is not None or d.include is not None]
    if request.exclude is None and request.include is None and not own:
        return None
    p = model.bundle.predictor
    unknown: dict[str, list] = {}

    def resolve(refs: list | None, field: str) -> np.ndarray | None:
        if refs is None:
            return None
        positions, missing = label_positions(refs, p.vocab, p.label_texts)
        if missing:
            unknown.setdefault(field, []).extend(missing)
        return positions

    exclude, include = resolve(request.exclude, f"{where}exclude"), resolve(request.include, f"{where}include")
    shared = LabelFilter(NO_LABELS if exclude is None else exclude, include)
    filters = [shared] * n
    for i, d in enumerate(documents or ()):
        if d.exclude is not None or d.include is not None:
            mine = resolve(d.exclude, f"documents[{i}].exclude")
            theirs = resolve(d.include, f"documents[{i}].include")
            filters[i] = LabelFilter(
                shared.exclude if mine is None else np.union1d(shared.exclude, mine),
                shared.include if theirs is None else theirs,
            )
    if unknown:
        named = "; ".join(f"{field}: {', '.join(map(repr, refs[:20]))}" for field, refs in unknown.items())
        raise Problem(
            422,
            "validation-error",
            f"unknown labels ({named}): name labels by their id (an integer below {p.n_labels}) or their name",
            unknown_labels={field: [json_safe(ref) for ref in refs[:100]] for field, refs in unknown.items()},
        )
    for i, f in enumerate(filters):
        size = f.exclude.size + (0 if f.include is None else f.include.size)
        if size > limit:
            doc = f" of documents[{i}]" if documents else ""
            raise Problem(
                422,
                "validation-error",
                f"exclude/include{doc}: {size} labels (their branches included) is above the maximum of {limit} "
                "(XTAG_MAX_FILTER_LABELS)",
            )
    return filters


def reweight_gains(model: ServedModel, rw: Reweight | None) -> np.ndarray | None:
    if rw is None:
        return None
    return model.gains(rw.scheme, float(rw.alpha), None if rw.beta is None else float(rw.beta))


async def predict_rows(
    request: Request,
    model: ServedModel,
    texts: list[str],
    k: int,
    beam: int | None,
    a: np.ndarray | None,
    threshold: float | None,
    rw_key: tuple = (),
    explain: bool = False,
    rerank: bool = True,
    ids: list[str | None] | None = None,
    filters: list[LabelFilter | None] | None = None,
    label_text: bool = False,
) -> list[orjson.Fragment]:
    """Each text's top-k labels as JSON ({id, name, score} list, and each label's `gain` when reweighted, its
    `label` and `description` with `label_text`), through the micro-batcher when it is on (and the shadow's job
    left in the scope: served_predictions)."""
    preds = await served_predictions(request, model, texts, k, beam, a, rw_key, rerank, ids, filters)
    gains = (
        None if a is None else gains_of(preds, a)
    )  # what the labels were ranked by (models/inference/reweighting.py)
    if not explain:
        lists = partial(label_lists, prefixes(model, label_text), preds, threshold, gains)
        return await off_loop_if_large(request, lists, preds.labels.size)
    return await explained_rows(request, model, texts, preds, threshold, rerank, gains, label_text)


def prefixes(model: ServedModel, label_text: bool) -> LabelPrefixes:
    """The rendered label prefixes a response is built from: with the label texts only when the request asks."""
    return model.text_prefixes if label_text else model.label_prefixes


async def served_predictions(
    request: Request,
    model: ServedModel,
    texts: list[str],
    k: int,
    beam: int | None,
    a: np.ndarray | None,
    rw_key: tuple = (),
    rerank: bool = True,
    ids: list[str | None] | None = None,
    filters: list[LabelFilter | None] | None = None,
) -> Predictions:
    """`predict_arrays`, and for a shadowed model the request's ShadowJob (texts, client `ids`, options, the
    answer's labels) left in the scope for the handler's background task (shadow_task); not for a filtered
    request, whose answer the shadow's unfiltered one would not agree with."""
    preds = await predict_arrays(request, model, texts, k, beam, a, rw_key, rerank, filters)
    if model.shadow is not None and filters is None:
        ids = ids or [None] * len(texts)
        request.scope[JOB_KEY] = model.shadow.job(texts, ids, k, rw_key or None, rerank, model, preds.labels)
    return preds


INLINE_LABELS = 2000  # labels of one answer made JSON on the event loop (about a ms); more go to a worker


async def off_loop_if_large(request: Request, fn, labels: int):
    """`fn()`, which makes `labels` labels' JSON: inline when few, else in the inference executor, so that a
    256 × 400 answer (100,000 labels: tens of ms of Python) does not hold the event loop."""
    executor = request.app.state.executor
    if labels <= INLINE_LABELS or executor is None:
        return fn()
    return await asyncio.get_running_loop().run_in_executor(executor, fn)


async def explained_rows(
    request: Request,
    model: ServedModel,
    texts: list[str],
    preds: Predictions,
    threshold: float | None,
    rerank: bool = True,
    gains: np.ndarray | None = None,
    label_text: bool = False,
) -> list[orjson.Fragment]:
    """The label lists with each label's explanation, computed after the prediction and outside the
    micro-batcher, so that a plain request never waits for one. Always in a worker thread (unless
    XTAG_INFERENCE_THREADS=0 asks for the loop), never inlined like a short prediction: one 99,000-character text
    at k = 595 takes 0.3-0.6 s to explain, and held /health for as long on the loop (issue 38). The worker
    stops between two documents when the client hangs up (service/http/hangups.py)."""
    explained = partial(
        model.explained, preds=preds, threshold=threshold, rerank=rerank, gains=gains, label_text=label_text
    )
    run = metered(request, explained)
    return await run_off_loop(request.app.state.executor, run, texts, request.receive, StopFlag())


def metered(request: Request, fn):
    """`fn` with its CPU time counted towards the request's cost check (service/http/cost.py CostMeter)."""
    meter = request.scope.get(METER_KEY)
    return fn if meter is None else meter.wrap(fn)


def check_cost(request: Request, model: ServedModel) -> None:
    """After the work: a request whose CPU exceeded twice its estimate is logged and counted
    (xtag_cost_underestimated_requests), so that a cost model that drifts low is seen."""
    meter = request.scope.get(METER_KEY)
    if meter is not None:
        meter.check(model.served_as or model.bundle.name, None if model.series is None else model.series.underestimated)


async def predict_arrays(
    request: Request,
    model: ServedModel,
    texts: list[str],
    k: int,
    beam: int | None,
    a: np.ndarray | None,
    rw_key=(),
    rerank: bool = True,
    filters: list[LabelFilter | None] | None = None,
) -> Predictions:
    """Top-k label ids and scores for `texts`, through the micro-batcher when it is on (a filtered request is
    predicted alone: its filters are its texts')."""
    run = metered(request, partial(model.predict, k=k, beam_size=beam, a=a, rerank=rerank, filters=filters))
    batcher = model.batcher
    if filters is not None:
        model.series.filtered.inc()
    elif batcher is not None:
        return await batcher.submit((id(model), k, beam, rw_key, rerank), texts, run, request.receive)
    model.series.observe_batch(len(texts))
    return await run_off_loop(request.app.state.executor, run, texts, request.receive)


def shadow_task(request: Request) -> BackgroundTask | None:
    """The shadow's turn for this request (service/state/shadow.py), run once the answer has been sent."""
    job = request.scope.get(JOB_KEY)
    return None if job is None else job.background()


def reweight_key(opts: PredictOptions) -> tuple:
    rw = opts.reweight
    return () if rw is None else (rw.scheme, float(rw.alpha), rw.beta)


@router.post(
    "/v1/predict",
    response_model=PredictResponse,
    responses={**OK, **ERRORS},
    openapi_extra={**openapi_body(PredictRequest), "parameters": [ROUTING_PARAMETER]},
    summary="Top-k labels for one text",
)
async def predict(request: Request) -> Response:
    start = time.perf_counter()
    await require_api_key(request)  # served as a plain Starlette route too (app.py): no Depends on the hot path
    body = await parse_body(request, PredictRequest)
    model = await serving_model(request)
    k, beam, a, filters = check_options(request, model, body, [body.text], "text")
    rows = await predict_rows(
        request,
        model,
        [body.text],
        k,
        beam,
        a,
        body.threshold,
        reweight_key(body),
        body.explain,
        body.rerank,
        None,
        filters,
        label_text=body.label_text,
    )
    took = round((time.perf_counter() - start) * 1e3, 3)
    return await answer(request, model, {"labels": rows[0], "model": model.ref, "took_ms": took})


@router.post(
    "/v1/predict/batch",
    response_model=BatchResponse,
    responses={**OK, **ERRORS},
    openapi_extra={**openapi_body(BatchRequest), "parameters": [ROUTING_PARAMETER]},
    summary="Top-k labels for many texts, in input order",
)
async def predict_batch(request: Request) -> Response:
    start = time.perf_counter()
    await require_api_key(request)
    body = await parse_body(
        request, BatchRequest, check=document_limit(request.app.state.settings.limits.max_batch_documents)
    )
    first = body.documents[0].id
    model = await serving_model(request, key=None if first is None else str(first))  # sticky by the first id
    texts = [d.text for d in body.documents]
    k, beam, a, filters = check_options(request, model, body, texts, "documents[{i}].text", body.documents)
    if body.optimize is None:
        ids = [None if d.id is None else str(d.id) for d in body.documents]
        rows = await predict_rows(
            request,
            model,
            texts,
            k,
            beam,
            a,
            body.threshold,
            reweight_key(body),
            body.explain,
            body.rerank,
            ids,
            filters,
            label_text=body.label_text,
        )
    else:
        rows = await optimized_rows(request, model, body, texts, k, beam)
    # ids are strings in responses, whatever the request gave: a client reads one type (issue 28)
    results = [
        {"id": str(i if d.id is None else d.id), "labels": r} for i, (d, r) in enumerate(zip(body.documents, rows))
    ]
    took = round((time.perf_counter() - start) * 1e3, 3)
    return await answer(request, model, {"results": results, "model": model.ref, "took_ms": took})


async def optimized_rows(
    request: Request, model: ServedModel, body: BatchRequest, texts: list[str], k: int, beam: int | None
) -> list[orjson.Fragment]:
    """The batch's top-k sets chosen jointly for a macro metric; never micro-batched with other requests,
    because the optimum depends on exactly this batch."""
    if body.reweight is not None:
        raise Problem(422, "validation-error", "reweight and optimize are alternatives: give one of them")
    if len(texts) > SERVING_MAX_DOCS:
        raise Problem(
            422, "validation-error", f"optimize: at most {SERVING_MAX_DOCS} documents per batch, got {len(texts)}"
        )
    opt = body.optimize
    config = serving_config(opt.metric, float(opt.alpha), opt.method)
    run = partial(
        predict_optimized,
        model.bundle.predictor,
        k=k,
        beam_size=beam or model.default_beam,
        n_labels=model.n_labels,
        config=config,
    )
    model.series.observe_batch(len(texts))
    run = metered(request, run)
    preds = await run_off_loop(request.app.state.executor, run, texts, request.receive)  # one call: the batch's optimum
    if not body.explain:
        lists = partial(label_lists, prefixes(model, body.label_text), preds, body.threshold)
        return await off_loop_if_large(request, lists, preds.labels.size)
    return await explained_rows(request, model, texts, preds, body.threshold, label_text=body.label_text)


def _served_again(route, path: str, errors: dict, parameters: list, summary: str, operation_id: str) -> None:
    """`route`'s handler under another path, for a model by name or one version of it, in the OpenAPI schema."""
    router.add_api_route(
        path,
        route.endpoint,
        methods=["POST"],
        response_model=route.response_model,
        responses={**OK, **errors},
        openapi_extra={**route.openapi_extra, "parameters": parameters},
        summary=summary,
        operation_id=operation_id,
    )


for _route in list(router.routes):
    if getattr(_route, "path", None) in ALIASES:
        router.add_api_route(
            ALIASES[_route.path],
            _route.endpoint,
            methods=["POST"],
            include_in_schema=False,
            summary=f"alias of {_route.path}",
        )
        _served_again(
            _route,
            NAMED[_route.path],
            NAMED_ERRORS,
            [NAME_PARAMETER, ROUTING_PARAMETER],
            f"{_route.summary}, by the model NAME (as {_route.path} does with the default model)",
            f"{_route.name}_named",
        )
        _served_again(
            _route,
            PINNED[_route.path],
            PINNED_ERRORS,
            [NAME_PARAMETER, VERSION_PARAMETER],
            f"{_route.summary}, by version VERSION of the model NAME (no traffic routing)",
            f"{_route.name}_pinned",
        )
