"""The built-in page's time series: the last hour of traffic per endpoint, in fixed memory, no external service.

A ring of `slots` buckets of `step_s` seconds (default 360 × 10 s = one hour). Each bucket holds, per endpoint,
the request count, 4xx+5xx and 503 counts and a latency histogram over observability.LATENCY_BUCKETS (so the
page's percentiles come from the same bins as Prometheus's), plus the predictor calls' document counts. A
bucket is cleared when the clock comes round to it again. Reloads and model versions are kept as events
(a bounded deque). Endpoints are route templates (few); past MAX_ENDPOINTS they share one "other" row.

Timelines keeps one Timeline per served model (the page's model selector picks one), and one under "" for the
requests no model answered (labels, admin, feedback, errors before a model was chosen).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque

import numpy as np

MAX_ENDPOINTS = 32
MAX_TIMELINES = 64  # models ever served in this process, plus ""; past it they share one


class Timeline:
    def __init__(self, bounds: tuple[float, ...], step_s: float = 10.0, slots: int = 360, clock=time.time):
        self.bounds = np.asarray(bounds, dtype=np.float64)
        self.step_s, self.slots, self.clock = step_s, slots, clock
        bins = len(bounds) + 1  # the last bin: over the largest bound
        self.bucket = np.full(slots, -1, dtype=np.int64)  # which absolute bucket each slot holds
        self.requests = np.zeros((slots, MAX_ENDPOINTS), dtype=np.int64)
        self.errors = np.zeros((slots, MAX_ENDPOINTS), dtype=np.int64)
        self.unavailable = np.zeros((slots, MAX_ENDPOINTS), dtype=np.int64)
        self.latency = np.zeros((slots, MAX_ENDPOINTS, bins), dtype=np.int64)
        self.batch_calls = np.zeros(slots, dtype=np.int64)
        self.batch_docs = np.zeros(slots, dtype=np.int64)
        self.batch_max = np.zeros(slots, dtype=np.int64)
        self.endpoints: dict[str, int] = {}
        self.events: deque[dict] = deque(maxlen=256)
        self._lock = threading.Lock()  # predictor threads add batches while the loop adds requests
        self._bounds = [float(x) for x in bounds]
        self._pending_bucket = -1
        self._pending: dict[str, list] = {}  # endpoint → [requests, errors, 503s, latency histogram] of that bucket

    def _slot(self) -> int:
        """The slot of the current bucket, cleared first if it still holds an older one (lock held)."""
        b = int(self.clock() // self.step_s)
        s = b % self.slots
        if self.bucket[s] != b:
            self.bucket[s] = b
            for a in (self.requests, self.errors, self.unavailable, self.latency):
                a[s] = 0
            self.batch_calls[s] = self.batch_docs[s] = self.batch_max[s] = 0
        return s

    def _row(self, endpoint: str) -> int:
        row = self.endpoints.get(endpoint)
        if row is None:
            if len(self.endpoints) >= MAX_ENDPOINTS - 1:
                endpoint = "other"
            row = self.endpoints.setdefault(endpoint, len(self.endpoints))
        return row

    def add(self, endpoint: str, status: int, seconds: float) -> None:
        """One answered request. Counted in plain Python (a few µs on the request path; numpy scalar updates
        cost ~15 µs) and moved into the ring's arrays when its bucket ends or the series is read."""
        b = int(self.clock() // self.step_s)
        with self._lock:
            if b != self._pending_bucket:
                self._flush()
                self._pending_bucket = b
            row = self._pending.get(endpoint)
            if row is None:
                row = self._pending[endpoint] = [0, 0, 0, [0] * (len(self._bounds) + 1)]
            row[0] += 1
            row[1] += status >= 400
            row[2] += status == 503
            row[3][bisect_left(self._bounds, seconds)] += 1

    def _flush(self) -> None:
        """Move the pending bucket's counts into its slot (lock held)."""
        if not self._pending:
            return
        b = self._pending_bucket
        s = b % self.slots
        if self.bucket[s] != b:
            if self.bucket[s] > b:  # the ring has moved past it
                self._pending.clear()
                return
            self.bucket[s] = b
            for a in (self.requests, self.errors, self.unavailable, self.latency):
                a[s] = 0
            self.batch_calls[s] = self.batch_docs[s] = self.batch_max[s] = 0
        for endpoint, (n, errors, unavailable, hist) in self._pending.items():
            e = self._row(endpoint)
            self.requests[s, e] += n
            self.errors[s, e] += errors
            self.unavailable[s, e] += unavailable
            self.latency[s, e] += hist
        self._pending.clear()

    def add_batch(self, documents: int) -> None:
        with self._lock:
            s = self._slot()
            self.batch_calls[s] += 1
            self.batch_docs[s] += documents
            self.batch_max[s] = max(self.batch_max[s], documents)

    def mark(self, text: str, kind: str = "reload") -> None:
        """An event for the charts' markers (a reload, the model version now served)."""
        with self._lock:
            self.events.append({"t": round(self.clock(), 3), "kind": kind, "text": text})

    def series(self, minutes: float = 60) -> dict:
        """The buckets of the last `minutes` (oldest first) as JSON-ready lists; null where nothing happened."""
        with self._lock:
            self._flush()
            now = int(self.clock() // self.step_s)
            n = min(self.slots, max(1, int(minutes * 60 // self.step_s)))
            wanted = np.arange(now - n + 1, now + 1)
            slots = wanted % self.slots
            live = self.bucket[slots] == wanted
            pick = lambda a: np.where(live.reshape((-1,) + (1,) * (a.ndim - 1)), a[slots], 0)  # noqa: E731
            requests, errors, unavailable, latency = (
                pick(a) for a in (self.requests, self.errors, self.unavailable, self.latency)
            )
            calls, docs, biggest = (pick(a) for a in (self.batch_calls, self.batch_docs, self.batch_max))
            endpoints = dict(self.endpoints)
            events = [e for e in self.events if e["t"] >= wanted[0] * self.step_s]
        out = {"step_s": self.step_s, "t": (wanted * self.step_s).tolist(), "endpoints": {}, "events": events}
        for name, e in endpoints.items():
            count = requests[:, e]
            if not count.any():
                continue
            rate = lambda a: [round(float(x / c), 4) if c else None for x, c in zip(a, count, strict=True)]  # noqa: E731
            out["endpoints"][name] = {
                "qps": [round(float(c) / self.step_s, 3) for c in count],
                **{f"p{q}": self._percentile(latency[:, e], q / 100) for q in (50, 90, 99)},
                "error_rate": rate(errors[:, e]),
                "unavailable_rate": rate(unavailable[:, e]),
            }
        out["batch"] = {
            "mean": [round(float(d / c), 2) if c else None for d, c in zip(docs, calls, strict=True)],
            "max": [int(m) if c else None for m, c in zip(biggest, calls, strict=True)],
        }
        return out

    def _percentile(self, hist: np.ndarray, q: float) -> list[float | None]:
        """Per bucket, the q-quantile in ms, interpolated inside its histogram bin (as histogram_quantile does)."""
        edges = np.concatenate([[0.0], self.bounds, [self.bounds[-1]]]) * 1e3  # the open last bin reads as its floor
        out = []
        for row in hist:
            total = row.sum()
            if not total:
                out.append(None)
                continue
            cum = np.cumsum(row)
            i = int(np.searchsorted(cum, q * total))
            before = cum[i - 1] if i else 0
            share = (q * total - before) / row[i] if row[i] else 0.0
            out.append(round(float(edges[i] + share * (edges[i + 1] - edges[i])), 3))
        return out


class Timelines:
    """One Timeline per model name ("" for requests no model answered), made on first use."""

    def __init__(self, bounds: tuple[float, ...], **options):
        self.bounds, self.options = bounds, options
        self.by_model: dict[str, Timeline] = {}

    def get(self, model: str) -> Timeline:
        found = self.by_model.get(model)
        if found is None:
            if len(self.by_model) >= MAX_TIMELINES:  # never reached by a sane server; bounded all the same
                model = "other"
            found = self.by_model.setdefault(model, Timeline(self.bounds, **self.options))
        return found

    def series(self, model: str, minutes: float = 60) -> dict:
        """`model`'s series (empty for a name never seen: a reader creates no timeline)."""
        found = self.by_model.get(model) or Timeline(self.bounds, **self.options)
        return found.series(minutes)

    def add(self, model: str, endpoint: str, status: int, seconds: float) -> None:
        self.get(model).add(endpoint, status, seconds)

    def models(self) -> list[str]:
        return sorted(name for name in self.by_model if name)
