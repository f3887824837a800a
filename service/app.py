"""create_app(settings): the FastAPI app, its lifespan (load, warm up, SIGHUP) and its middleware stack."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse
from starlette.routing import Match, Route
from uvicorn.config import STARTUP_FAILURE
from xtag.config.settings import Settings, worker_settings
from xtag.models.bundle.snapshot import server_root
from xtag.models.errors import XtagError
from xtag.models.families import FAMILIES, family
from xtag.models.features.device import Device
from xtag.models.threads import apply as size_thread_pools
from xtag.models.threads import thread_count
from xtag.service.batching import MicroBatcher, PredictorPool
from xtag.service.deps import require_admin_key, require_api_key
from xtag.service.http import api_docs, problems
from xtag.service.http.admission import AdmissionMiddleware
from xtag.service.http.oip import InferRequest
from xtag.service.http.openapi_limits import apply_limits
from xtag.service.http.request_body import BodyReadMiddleware
from xtag.service.http.security import DASHBOARD_HEADERS, NoSniffMiddleware, ProblemCORSMiddleware
from xtag.service.observability.prometheus import LATENCY_BUCKETS, Metrics, ObservabilityMiddleware, RecentRequests
from xtag.service.observability.timeline import Timelines
from xtag.service.rollout.events import RolloutEvents
from xtag.service.rollout.policy import RolloutRefused, Rollouts, keep_ticking
from xtag.service.rollout.window import GateWindows
from xtag.service.routes import (
    admin,
    annif,
    feedback,
    health,
    labels,
    model_admin,
    models,
    monitoring,
    oip,
    predict,
    rollout,
    rollout_policy,
)
from xtag.service.schemas import REQUEST_MODELS, ProblemDetails
from xtag.service.state import shadow
from xtag.service.state.eviction import EvictionMetrics, LazyModels
from xtag.service.state.memory import freeze_heap
from xtag.service.state.model_repository import ModelRepository

DASHBOARD = Path(__file__).parent / "dashboard"  # the page's files, served under the public /static/ URLs
log = logging.getLogger("xtag.service")


class HotRoute(Route):
    """A plain Starlette route that still names itself in the scope, for the per-endpoint metrics."""

    def matches(self, scope):
        match, child = super().matches(scope)
        if match != Match.NONE:
            child["route"] = self
        return match, child


def predictor_calls(settings: Settings, kind: str | None = None) -> int:
    """Predictor calls at once: XTAG_INFERENCE_THREADS when set, else the family's parallel_calls (for no kind:
    the most any family asks, which sizes the worker pool before a bundle is known), at most one per core."""
    if settings.server.inference_threads is not None:
        return settings.server.inference_threads
    wanted = family(kind).parallel_calls if kind else max(f.parallel_calls for f in FAMILIES.values())
    return max(1, min(wanted, thread_count()))


def make_batcher(
    settings: Settings, kind: str, executor: Executor | None, on_batch, recent: RecentRequests
) -> MicroBatcher | None:
    """The micro-batcher for a model kind, or None when batching is off."""
    if not settings.server.batching:
        return None
    wait = settings.server.batch_max_wait_ms
    if wait is None:
        wait = family(kind).batch_wait_ms  # encoder bundles batch best with a short wait
    alone = (lambda: recent.in_flight <= 1) if executor is not None else None  # no executor: always inline
    return MicroBatcher(
        executor,
        wait,
        settings.effective_batch_max_documents,
        max(predictor_calls(settings, kind), 1),
        on_batch,
        alone=alone,
        inline_max_texts=settings.server.inline_max_texts,
        inline_max_chars=settings.server.inline_max_chars,
    )


def _sighup(app: FastAPI) -> None:
    async def reload() -> None:
        failed = await admin.reload_all(app)  # each slot logs its switch (model, old → new version, seconds, RSS)
        for name, why in failed.items():
            log.error("SIGHUP reload of model %s failed, it keeps its old bundle: %s", name, why)

    task = asyncio.get_running_loop().create_task(reload())
    app.state.tasks.add(task)  # the loop keeps only a weak reference
    task.add_done_callback(app.state.tasks.discard)


def worker_pools(settings: Settings) -> tuple[PredictorPool | None, ThreadPoolExecutor]:
    """The predictor calls' threads (off the event loop, cheaper per call than anyio's shared pool; None: calls run
    on the loop) and the thread that decodes and validates large bodies (deps.parse_body)."""
    threads = predictor_calls(settings)
    return (PredictorPool(threads) if threads > 0 else None), ThreadPoolExecutor(1, thread_name_prefix="xtag-parse")


@asynccontextmanager
async def lifespan(app: FastAPI):
    state, settings = app.state, app.state.settings
    if state.lifespans:  # the same app started again (a TestClient reused): the last shutdown closed its pools
        state.executor, state.parse_executor = worker_pools(settings)
        for slot in state.registry.slots.values():
            if slot.current is not None:
                kind = slot.current.kind
                slot.current.batcher = make_batcher(
                    settings, kind, state.executor, slot.current.series.observe_batch, state.recent
                )
    state.lifespans += 1
    log.info("thread pools: %s", size_thread_pools())  # sized from the CPUs this process may use
    loop = asyncio.get_running_loop()
    hup = False
    if settings.admin.sighup_reload:
        try:
            loop.add_signal_handler(signal.SIGHUP, _sighup, app)
            hup = True
        except (RuntimeError, ValueError, NotImplementedError):  # not the main thread (e.g. TestClient)
            pass
    task = None
    if state.registry.slots:
        if settings.server.load_in_background:
            task = loop.create_task(_initial_load(app))
        else:
            try:
                await _load_all(app)  # fails startup (and a rolling restart) if the default bundle is bad
            except XtagError:
                if settings.server.uvicorn_supervisor_pid == os.getppid():
                    # A worker of `xtag serve --workers N` leaves at once (its reason is logged): uvicorn's
                    # supervisor pings its workers, and a ping that lands while this process is still finishing
                    # after a normal exit goes unanswered for XTAG_WORKER_START_TIMEOUT_S (seen: 300 s).
                    os._exit(STARTUP_FAILURE)
                raise
    ticker = loop.create_task(keep_ticking(state.rollouts, partial(shadow.rollout_figures, app)))
    try:
        yield
    finally:
        ticker.cancel()
        if task is not None:
            task.cancel()
        if hup:
            loop.remove_signal_handler(signal.SIGHUP)
        if state.executor is not None:
            state.executor.shutdown(wait=False, cancel_futures=True)
        state.parse_executor.shutdown(wait=False, cancel_futures=True)
        if state.feedback is not None:
            state.feedback.close()
        for scorer in state.shadows.values():
            scorer.close()
        state.metrics.process_exit()


async def _load_all(app: FastAPI) -> None:
    """Load every model, the default first; raise if the default fails (another model's failure is logged and
    shown in /ready and GET /v1/models while the rest serve)."""
    registry = app.state.registry
    failed = await admin.reload_all(app)  # each failure is logged by its slot
    freeze_heap()  # before the first request: what is alive now is not walked by each full collection
    if registry.default in failed:
        raise XtagError(failed[registry.default])


async def _initial_load(app: FastAPI) -> None:
    """Load in the background; once loaded the `on_ready` callbacks run (`xtag serve` prints its URLs). On failure
    of the default model /ready says why (registry.last_error), and `on_startup_failure` callbacks run: `xtag serve`
    stops the server and exits non-zero (an orchestrator sees a failed start, not a process that stays unready
    forever), while an embedding app may wait for a reload or SIGHUP."""
    try:
        await _load_all(app)
    except XtagError as exc:
        slot = app.state.registry.default_slot  # the path as given: `xtag serve runs/x` is told `xtag export runs/x`
        why = (slot.local_error if slot is not None else None) or str(exc)
        for callback in app.state.on_startup_failure:
            callback(why)
        return
    for callback in app.state.on_ready:
        callback()


def start_rollouts(app: FastAPI, metrics: Metrics, timelines: Timelines) -> None:
    """The rollout policies (service/rollout/policy.py), fed every answered request, and models.toml's
    [rollouts.NAME] started: each waits for its canary to load, then moves on the lifespan's ticker."""
    registry, windows = app.state.registry, GateWindows(LATENCY_BUCKETS)
    events = RolloutEvents(metrics.registry, timelines)
    app.state.rollouts = rollouts = Rollouts(registry.traffic.get, windows, events)
    for name in registry.traffic:
        events.declare(name)
    registry.listeners.append(lambda old, new: new is None or events.declare(new.served_as))
    registry.hooks.answered.append(windows.observe)
    registry.hooks.changed.append(rollouts.changed)
    for name, policy in app.state.settings.model_set.rollouts.items():
        figures = shadow.rollout_figures(app, name, policy.version) if policy.gates.shadow_gated else None
        try:
            rollouts.start(name, policy, figures)
        except RolloutRefused as exc:
            raise XtagError(f"models file: rollouts.{name}: {exc}") from None


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service as an ASGI app; loads `settings.models.bundle` on startup (in the background by default)."""
    settings = settings or Settings()
    app = FastAPI(
        title="xtag",
        version="1",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's pages load their scripts from a CDN: api_docs.install serves them offline
        redoc_url=None,
        description="Extreme multi-label tagging over HTTP: top-k labels for texts, with per-request "
        "macro-aware reweighting. Errors are application/problem+json.",
    )
    app.state.settings = settings
    app.state.registry = ModelRepository(
        settings.model_set,
        settings.server.warmup_text,
        Device.parse(settings.models.device, settings.models.tensorrt),
        drift_window=settings.server.drift_window,
        options=settings.runtime_options(),
        max_memory_mb=settings.limits.max_memory_mb,
        snapshot_root=server_root(settings.models.snapshot_dir, settings.server.uvicorn_supervisor_pid or os.getpid()),
    )
    app.state.timelines = timelines = Timelines(LATENCY_BUCKETS)
    app.state.metrics = metrics = Metrics(timelines)
    app.state.recent = recent = RecentRequests(settings.server.stats_window_s)
    app.state.tasks = set()
    app.state.reload_started = {}  # model name → time.time() of its last HTTP load attempted (admin.throttle)
    app.state.lifespans = 0  # how many times it started: a restarted app needs new worker pools (lifespan)
    app.state.feedback = None  # routes/feedback.py opens the store on the first write
    app.state.on_startup_failure = []  # called with the reason when the bundle given at startup does not load
    app.state.on_ready = []  # called once the models given at startup have loaded (`xtag serve` prints its URLs)
    app.state.executor, app.state.parse_executor = worker_pools(settings)

    def on_swap(old, new) -> None:
        metrics.set_model(old, new)
        app.openapi_schema = None  # rebuilt on the next request: the label count bounds k (http/openapi_limits.py)
        if new is None:  # unloaded
            metrics.series(old.served_as).timeline.mark(f"{old.served_as} unloaded", "unload")
            return
        was = f" (was {old.bundle.version})" if old is not None else ""
        named = f"{new.served_as}: " if len(app.state.registry.slots) > 1 else ""
        new.series.timeline.mark(
            f"{named}{new.bundle.name} {new.bundle.version}{was}", "reload" if old is not None else "load"
        )
        new.batcher = make_batcher(settings, new.kind, app.state.executor, new.series.observe_batch, recent)
        new.shadow = app.state.shadows.get(new.served_as)  # the model scoring its requests after them, if any

    app.state.registry.listeners.append(on_swap)

    def on_traffic(change) -> None:
        metrics.set_traffic(app.state.registry.traffic[change.model], change.action)
        split = ", ".join(f"{v} {w}%" for v, w in change.after.items() if w)
        metrics.series(change.model).timeline.mark(f"{change.model}: {change.action} ({split})", "traffic")

    app.state.registry.hooks.changed.append(on_traffic)
    for traffic in app.state.registry.traffic.values():
        metrics.set_traffic(traffic)
    app.state.lazy = None  # XTAG_EVICT=lru: the models loaded on their first request (service/state/eviction.py)
    if settings.limits.evict == "lru":
        limits = settings.limits
        app.state.lazy = LazyModels(
            app.state.registry, limits.max_memory_mb, limits.load_wait_s, EvictionMetrics(metrics.registry)
        )
    app.state.shadow_metrics = shadow.ShadowMetrics(metrics.registry)
    app.state.shadows = {}  # primary's name → its ShadowScorer (service/state/shadow.py)
    for new, old in app.state.registry.shadows.items():  # --shadow NEW=OLD, XTAG_SHADOW, models.toml's shadow_of
        shadow.declare(app, old, new, partial(shadow.served, app.state.registry, new))
    start_rollouts(app, metrics, timelines)
    problems.install(app)
    protected = [Depends(require_api_key)]
    app.include_router(health.router)
    app.include_router(oip.health_router)  # the Open Inference Protocol's probes, open as /health and /ready are
    for module in (predict, models, labels, monitoring, annif, oip):
        app.include_router(module.router, dependencies=protected)
    for module in (
        admin,
        model_admin,
        rollout,
        rollout_policy,
        feedback,
    ):  # XTAG_ADMIN_KEY; without one configured: off (403)
        app.include_router(module.router, dependencies=[Depends(require_admin_key)])
    # The prediction handlers (/v2's infer too) also run as plain Starlette routes placed first: same functions (they
    # check the API key themselves), without FastAPI's per-request dependency machinery, which is about
    # half the framework cost of a call (~140 of ~300 µs). The APIRoutes stay for the OpenAPI schema.
    hot = [(predict, predict.HOT_ROUTES), (oip, oip.HOT_ROUTES)]
    for route in [
        r for module, paths in hot for r in module.router.routes if isinstance(r, APIRoute) and r.path in paths
    ]:
        app.router.routes.insert(0, HotRoute(route.path, route.endpoint, methods=list(route.methods)))
    api_docs.install(app, str(DASHBOARD))
    app.mount("/static", StaticFiles(directory=DASHBOARD), name="static")

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def dashboard() -> FileResponse:
        return FileResponse(DASHBOARD / "index.html", media_type="text/html", headers=DASHBOARD_HEADERS)

    # outermost last: NoSniff → Observability → LastResort → CORS → Admission → BodyRead → the app
    budget = settings.limits.max_queue * settings.limits.max_body_bytes or None  # XTAG_MAX_QUEUE=0: no bound, no budget
    app.add_middleware(
        BodyReadMiddleware,
        limit=settings.limits.max_body_bytes,
        timeout_s=settings.limits.body_timeout_s,
        budget=budget,
    )
    # outside the body reader: a full server refuses before reading; the slot is taken once the body is whole
    app.add_middleware(AdmissionMiddleware, max_queue=settings.limits.max_queue, on_reject=metrics.rejected.inc)
    if settings.server.cors_origin_list:  # off by default: no CORS headers, so browsers keep other origins out
        app.add_middleware(
            ProblemCORSMiddleware,
            allow_origins=settings.server.cors_origin_list,
            allow_methods=["GET", "POST"],
            allow_headers=["Content-Type", "Authorization", "X-API-Key", "X-Admin-Key"],
        )
    app.add_middleware(problems.LastResortMiddleware)  # inside the metrics and nosniff, so its 500s and 503s get both
    app.add_middleware(
        ObservabilityMiddleware,
        metrics=metrics,
        recent=recent,
        routes=app.router.routes,
        access_log=settings.server.access_log,
        hooks=app.state.registry.hooks,
    )
    app.add_middleware(NoSniffMiddleware)

    def custom_openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (*REQUEST_MODELS, InferRequest, ProblemDetails):
                js = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(js.pop("$defs", {}))
                components[model.__name__] = js
            components["Problem"] = components.pop(ProblemDetails.__name__)
            current = app.state.registry.current
            apply_limits(schema, settings, None if current is None else current.n_labels)
            app.openapi_schema = problems.document_problems(schema)
        return app.openapi_schema

    app.openapi = custom_openapi
    return app


def app_from_env() -> FastAPI:
    """Factory for `uvicorn --factory xtag.service.app:app_from_env` (its supervisor's settings, else XTAG_*
    variables)."""
    return create_app(worker_settings())
