"""Prometheus metrics and a rolling window of recent requests (the dashboard's QPS, percentiles, error rate).

Each app has its own CollectorRegistry (tests build many apps). With several workers, `serve` sets
PROMETHEUS_MULTIPROC_DIR and /metrics aggregates every worker's files (prometheus-client's
multiprocess mode); the dashboard's /v1/stats window is per worker.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from xtag.config.settings import ClusterEnvironment
from xtag.service.observability.logs import ACCESS
from xtag.service.observability.timeline import Timeline, Timelines

# 0.5–100 ms in steps of at most 2× (most answers take 0.3–30 ms), then coarse up to 10 s
LATENCY_BUCKETS = (
    0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
    0.25, 0.5, 1.0, 2.5, 10.0,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MODEL_KEY = "xtag.model"  # the scope key where deps.served_model names the model that served a request
VERSION_KEY = "xtag.version"  # ... and the version of it that answered (service/rollout/traffic.py)
QUIET_PATHS = ("/metrics", "/health", "/ready", "/v1/stats", "/v1/timeline", "/v1/drift", "/static", "/favicon.ico")
CLIENT_CLOSED = 499  # the status counted for a request whose client went away before the answer
ENDPOINT_CACHE = 1024


def multiprocess() -> bool:
    return ClusterEnvironment().prometheus_multiproc_dir is not None


def placement_labels(model) -> list[tuple[str, str, str]]:
    """(device, component, provider) for each placed component of a ServedModel's bundle."""
    runtime = model.bundle.runtime
    return [(runtime.get("device", "cpu"), c, where) for c, where in runtime.get("placement", {}).items()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def forget_dead_workers() -> None:
    """Drop the live gauges (model info, in-flight) of worker processes that died without saying so.

    A worker that exits cleanly marks itself dead (Metrics.process_exit); one that was killed cannot,
    and its last values stayed in the aggregate forever (issue 30: a dead worker's model series, and 25
    requests in flight with no traffic). Every worker checks at each scrape. A reused pid would keep a
    dead worker's series until that process exits too; pids are not reused that quickly."""
    folder = ClusterEnvironment().prometheus_multiproc_dir
    pids = {int(path.stem.rsplit("_", 1)[1]) for path in Path(folder).glob("gauge_live*_*.db")}
    for pid in pids:
        if not alive(pid):
            try:
                mark_process_dead(pid, folder)
            except FileNotFoundError:  # another worker got there first
                pass


class Metrics:
    """The service's Prometheus metrics, on a registry of its own."""

    def __init__(self, timelines: Timelines | None = None) -> None:
        self.timelines = timelines  # the built-in page's series per model (observability/timeline.py), fed alike
        self._models: dict[str, ModelSeries] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # `version`: the version of the model that answered (service/rollout/traffic.py), as few as a model's
        # configured versions; "" with the model for requests no model answered
        self.requests = Counter(
            "xtag_http_requests",
            'HTTP requests by endpoint, method, status and the model and version that answered ("" for no model)',
            ["endpoint", "method", "status", "model", "version"],
            registry=r,
        )
        self.latency = Histogram(
            "xtag_http_request_duration_seconds",
            "request latency by endpoint, status, model and version",
            ["endpoint", "method", "status", "model", "version"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "xtag_http_requests_in_flight", "requests being handled", registry=r, multiprocess_mode="livesum"
        )
        self.batch_size = Histogram(
            "xtag_predict_batch_documents", "documents per predictor call", ["model"], buckets=BATCH_BUCKETS, registry=r
        )
        self.documents = Counter("xtag_predicted_documents", "documents tagged", ["model"], registry=r)
        self.model_info = Gauge(
            "xtag_model_info",
            "each served model (value 1): its served name, bundle name, version, kind and label count",
            ["model", "name", "version", "kind", "labels"],
            registry=r,
            multiprocess_mode="liveall",
        )
        self.model_load = Gauge(
            "xtag_model_load_seconds",
            "load time of each served bundle",
            ["model"],
            registry=r,
            multiprocess_mode="liveall",
        )
        self.placement = Gauge(
            "xtag_model_placement",
            "where each component of the served model runs (value 1): its onnxruntime provider or device",
            ["model", "device", "component", "provider"],
            registry=r,
            multiprocess_mode="liveall",
        )
        # drift of the served labels (service/observability/drift.py): one number and three bands, never a series per label
        self.drift_js = Gauge(
            "xtag_label_drift_js_divergence",
            "Jensen-Shannon divergence (base 2) of the labels returned in the drift window from the training labels",
            ["model"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.band_share = Gauge(
            "xtag_predicted_label_band_share",
            "share of the labels returned in the drift window by training-frequency band (head, torso, tail)",
            ["model", "band"],
            registry=r,
            multiprocess_mode="liveall",
        )
        self.reloads = Counter(
            "xtag_model_reloads", "bundle reloads by model and outcome", ["model", "outcome"], registry=r
        )
        self.underestimated = Counter(
            "xtag_cost_underestimated_requests",
            "prediction requests whose measured CPU exceeded twice the cost estimate they were admitted on "
            "(service/http/cost.py; each is also logged)",
            ["model"],
            registry=r,
        )
        self.traffic_changes = Counter(
            "xtag_traffic_changes",
            "changes of a model's traffic between its versions, by action (weights, promote, rollback)",
            ["model", "action"],
            registry=r,
        )
        self.traffic_weight = Gauge(
            "xtag_traffic_weight_percent",
            "the share of a model's requests routed to each of its versions, in percent",
            ["model", "version"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.rejected = Counter(
            "xtag_overload_rejected_requests",
            "prediction requests answered 503 at once because XTAG_MAX_QUEUE were in flight",
            registry=r,
        )

    def series(self, model: str) -> ModelSeries:
        """The prediction series of the model served as `model`, each label child resolved once, here, never per
        request (a `.labels()` lookup costs a few µs: the hot path keeps today's cost with a model label)."""
        found = self._models.get(model)
        if found is None:
            timeline = self.timelines.get(model) if self.timelines is not None else None
            found = self._models[model] = ModelSeries(self, model, timeline)
        return found

    def set_model(self, old, new) -> None:
        """`new` now serves under its name (replacing `old` under that name, if any): its info series."""
        if old is not None:
            self.drop_model(old)
        if new is None:  # unloaded
            return
        name = served_name(new)
        self.model_info.labels(name, new.bundle.name, new.bundle.version, new.kind, str(new.n_labels)).set(1)
        for labels in placement_labels(new):
            self.placement.labels(name, *labels).set(1)
        self.model_load.labels(name).set(new.bundle.load_seconds)
        new.series = self.series(name)

    def set_traffic(self, traffic, action: str | None = None) -> None:
        """A model's traffic split (service/rollout/traffic.py) as gauges; `action`: counted as a change."""
        for version, weight in traffic.weights.items():
            self.traffic_weight.labels(traffic.model, version).set(weight)
        if action is not None:
            self.traffic_changes.labels(traffic.model, action).inc()

    def drop_model(self, old) -> None:
        """The info series of a model no longer served (replaced or unloaded); its counters stay (Prometheus
        counters never go back)."""
        name = served_name(old)
        self._drop(self.model_info, (name, old.bundle.name, old.bundle.version, old.kind, str(old.n_labels)))
        for labels in placement_labels(old):
            self._drop(self.placement, (name, *labels))

    @staticmethod
    def _drop(gauge: Gauge, labels: tuple[str, ...]) -> None:
        """A series of the model being replaced: 0 across worker processes (summed), else removed."""
        if multiprocess():
            gauge.labels(*labels).set(0)
            return
        try:
            gauge.remove(*labels)
        except KeyError:
            pass

    def publish_drift(self, model, summary: dict | None) -> None:
        """Copy a served model's drift summary (LabelDrift.summary) into its gauges; called when /metrics or
        /v1/drift is read."""
        if summary is None or summary["js_divergence"] is None:
            return
        name = served_name(model)
        self.drift_js.labels(name).set(summary["js_divergence"])
        for band, share in summary["bands"].items():
            self.band_share.labels(name, band).set(share["served"])

    def process_exit(self) -> None:
        """Drop this worker's live gauges (model info, in-flight) from the multiprocess aggregate."""
        if multiprocess():
            mark_process_dead(os.getpid())

    def exposition(self) -> bytes:
        if multiprocess():
            forget_dead_workers()
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)


def served_name(model) -> str:
    """The name a model is served under (its slot's), which its series carry as `model`."""
    return model.served_as or model.bundle.name


class ModelSeries:
    """One served model's prediction series, label children resolved once (Metrics.series)."""

    def __init__(self, metrics: Metrics, model: str, timeline: Timeline | None):
        self.name, self.timeline = model, timeline
        self.batch_size = metrics.batch_size.labels(model)
        self.documents = metrics.documents.labels(model)
        self.underestimated = metrics.underestimated.labels(model)

    def observe_batch(self, n: int) -> None:
        """One predictor call of `n` documents (the micro-batcher's on_batch)."""
        self.batch_size.observe(n)
        self.documents.inc(n)
        if self.timeline is not None:
            self.timeline.add_batch(n)


class RecentRequests:
    """Ring buffer (numpy) of (time, seconds, status) of API requests; summaries cover the last `window` seconds."""

    def __init__(self, window: float = 60.0, capacity: int = 131_072):
        self.window = window
        self.times = np.full(capacity, -np.inf)
        self.seconds = np.zeros(capacity)
        self.status = np.zeros(capacity, dtype=np.int16)
        self.next = 0
        self.started = time.time()
        self.in_flight = 0

    def add(self, seconds: float, status: int) -> None:
        i = self.next % len(self.times)
        self.times[i], self.seconds[i], self.status[i] = time.time(), seconds, status
        self.next += 1

    def summary(self) -> dict:
        now = time.time()
        recent = self.times >= now - self.window
        lat = self.seconds[recent] * 1e3
        status = self.status[recent]
        n = int(recent.sum())
        span = min(self.window, max(now - self.started, 1e-9))
        pct = {f"p{q}": (round(float(np.percentile(lat, q)), 3) if n else None) for q in (50, 90, 99)}
        errors5 = int((status >= 500).sum())
        errors4 = int((status >= 400).sum()) - errors5
        return {
            "window_s": self.window,
            "requests": n,
            "qps": round(n / span, 3),
            "latency_ms": pct,
            "errors_4xx": errors4,
            "errors_5xx": errors5,
            "error_rate": round((errors4 + errors5) / n, 4) if n else 0.0,
        }


class ObservabilityMiddleware:
    """Pure ASGI: in-flight gauge, per-endpoint count/latency by status (and model and version), the dashboard's
    window, and the `answered` hooks of a rollout (service/rollout/traffic.py).

    A request whose client went away before its answer started counts as status 499 (nginx's "client
    closed request"), not as a server error nor as the status of an answer that reached nobody
    (service/http/hangups.py notices the hang-up while the request is worked on). A request answered before
    routing (admission's 503) counts under the endpoint its path names, found in `routes`, and a mount's
    files (/static) under the mount's path. With `access_log`, each request also
    gets one INFO line on xtag.access (here, not uvicorn's, which knows neither the latency nor the endpoint)."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        recent: RecentRequests,
        routes: list | None = None,
        access_log: bool = False,
        hooks=None,
    ):
        self.app, self.metrics, self.recent = app, metrics, recent
        self.hooks = hooks  # service/rollout/traffic.py Hooks: every request a model answered, as it ends
        self.access = logging.getLogger(ACCESS) if access_log else None
        self.routes = routes if routes is not None else []
        self.endpoints: dict[tuple[str, str], str] = {}  # (method, path) → endpoint, for unrouted requests

    def endpoint(self, scope: Scope, root_path: str = "") -> str:
        """The route's path, or for a request the router did not name (a mount's static files: by the mount's
        path, e.g. /static; one answered before routing) the path of the route it matches, else "unmatched"."""
        route = scope.get("route")
        if route is not None:
            return getattr(route, "path", None) or "unmatched"
        key = (scope["method"], scope["path"])
        found = self.endpoints.get(key)
        if found is None:
            best, best_match = None, Match.NONE
            as_received = {**scope, "root_path": root_path}  # a mount appended its path to root_path
            for route in self.routes:  # as Starlette's router: the first full match, else the first partial
                match, _ = route.matches(as_received)
                if match.value > best_match.value:
                    best, best_match = route, match
                    if match == Match.FULL:
                        break
            found = getattr(best, "path", None) or "unmatched"
            if len(self.endpoints) >= ENDPOINT_CACHE:  # e.g. Annif project ids: many paths, few endpoints
                self.endpoints.clear()
            self.endpoints[key] = found
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = None
        disconnected = False
        root_path = scope.get("root_path", "")  # a mount changes it: endpoint() matches the path as it came

        async def receive_wrapper() -> Message:
            nonlocal disconnected
            message = await receive()
            disconnected = disconnected or message["type"] == "http.disconnect"
            return message

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":  # an answer to a client already gone reaches nobody
                status = CLIENT_CLOSED if disconnected else message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        self.recent.in_flight += 1
        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        finally:
            self.metrics.in_flight.dec()
            self.recent.in_flight -= 1
            elapsed = time.perf_counter() - start
            if status is None:
                status = CLIENT_CLOSED if disconnected else 500
            endpoint = self.endpoint(scope, root_path)
            code = str(status)
            model = scope.get(MODEL_KEY, "")  # set by deps.served_model: the name of the model that answered
            version = scope.get(VERSION_KEY, "")  # ... and its version
            self.metrics.requests.labels(endpoint, scope["method"], code, model, version).inc()
            self.metrics.latency.labels(endpoint, scope["method"], code, model, version).observe(elapsed)
            if model and self.hooks is not None and self.hooks.answered:
                self.hooks.answer(model, version, status, elapsed)
            if not scope["path"].startswith(QUIET_PATHS) and scope["path"] != "/":
                self.recent.add(elapsed, status)
                if self.metrics.timelines is not None:
                    self.metrics.timelines.add(model, endpoint, status, elapsed)
            if self.access is not None:
                self._access_line(scope, endpoint, status, elapsed)

    def _access_line(self, scope: Scope, endpoint: str, status: int, elapsed: float) -> None:
        client = scope.get("client")
        fields = {
            "client": client[0] if client else "-",
            "method": scope["method"],
            "path": scope["path"],
            "endpoint": endpoint,
            "status": status,
            "ms": round(elapsed * 1e3, 3),
        }
        self.access.info("%(client)s %(method)s %(path)s %(status)d %(ms).2f ms", fields, extra=fields)
