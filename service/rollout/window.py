"""The rollout gates' window: per version of a model, the answers of the last `window_s` seconds, in fixed memory.

Fed by the traffic hook with every answered request as (model, version, status, seconds), for the models
under a rollout only. The window is
`SLICES` slices of window_s / SLICES seconds; each holds a request count, a 5xx count and a latency histogram
over the Prometheus bounds (observability/prometheus.py's LATENCY_BUCKETS, so a gate's p99 reads as the
dashboard's does). A slice is cleared when the clock comes round to it, so memory is SLICES × (bins + 2)
integers per version, whatever the traffic; versions past MAX_VERSIONS per model are not tracked.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from dataclasses import dataclass

SLICES = 20
MAX_VERSIONS = 16  # per model: a rollout compares two; a few more cover versions pinned by URL


@dataclass(frozen=True)
class WindowStats:
    """One version's answers over the window: how many, how many 5xx, and the p99 in ms (None without any)."""

    requests: int
    errors: int
    p99_ms: float | None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


class VersionWindow:
    """One version's ring of slices (the lock of its GateWindows held by every caller)."""

    def __init__(self, bins: int):
        self.slice = [-1] * SLICES  # which absolute slice each position holds
        self.requests = [0] * SLICES
        self.errors = [0] * SLICES
        self.latency = [[0] * bins for _ in range(SLICES)]

    def position(self, absolute: int) -> int:
        at = absolute % SLICES
        if self.slice[at] != absolute:
            self.slice[at], self.requests[at], self.errors[at] = absolute, 0, 0
            self.latency[at] = [0] * len(self.latency[at])
        return at


class GateWindows:
    """The windows of the models under a rollout; `observe` is the traffic hook, `stats` what a gate reads.

    Only a tracked model is counted (`track`, when its rollout starts): without a rollout the hook costs a dict
    lookup."""

    def __init__(self, bounds: tuple[float, ...], clock=time.monotonic):
        self.bounds, self.clock = list(bounds), clock
        self.slice_s: dict[str, float] = {}  # tracked model → its slice length (window_s / SLICES)
        self.by_model: dict[str, dict[str, VersionWindow]] = {}
        self._lock = threading.Lock()

    def track(self, model: str, window_s: float) -> None:
        """Count `model`'s answers over windows of `window_s`, from nothing."""
        with self._lock:
            self.slice_s[model] = window_s / SLICES
            self.by_model[model] = {}

    def forget(self, model: str) -> None:
        """Stop counting `model` (its rollout ended) and drop what was counted."""
        with self._lock:
            self.slice_s.pop(model, None)
            self.by_model.pop(model, None)

    def observe(self, model: str, version: str, status: int, seconds: float) -> None:
        """One answered request (a few µs: plain Python under one lock)."""
        slice_s = self.slice_s.get(model)
        if slice_s is None:
            return
        absolute = int(self.clock() // slice_s)
        with self._lock:
            versions = self.by_model.get(model)
            if versions is None:  # forgotten meanwhile
                return
            window = versions.get(version)
            if window is None:
                if len(versions) >= MAX_VERSIONS:
                    return
                window = versions[version] = VersionWindow(len(self.bounds) + 1)
            at = window.position(absolute)
            window.requests[at] += 1
            window.errors[at] += status >= 500
            window.latency[at][bisect_left(self.bounds, seconds)] += 1

    def stats(self, model: str, version: str) -> WindowStats:
        """`version`'s answers over the last window (the slice now filling included)."""
        with self._lock:
            slice_s = self.slice_s.get(model)
            window = self.by_model.get(model, {}).get(version)
            if slice_s is None or window is None:
                return WindowStats(0, 0, None)
            now = int(self.clock() // slice_s)
            live = [i for i in range(SLICES) if now - SLICES < window.slice[i] <= now]
            requests = sum(window.requests[i] for i in live)
            errors = sum(window.errors[i] for i in live)
            hist = [sum(window.latency[i][b] for i in live) for b in range(len(self.bounds) + 1)]
        return WindowStats(requests, errors, self._quantile(hist, 0.99))

    def _quantile(self, hist: list[int], q: float) -> float | None:
        """The q-quantile in ms, interpolated inside its bin as histogram_quantile does (the open last bin reads
        as its floor)."""
        total = sum(hist)
        if not total:
            return None
        edges = [0.0, *self.bounds, self.bounds[-1]]
        rank, seen = q * total, 0
        for i, n in enumerate(hist):
            if n and seen + n >= rank:
                share = (rank - seen) / n
                return round((edges[i] + share * (edges[i + 1] - edges[i])) * 1e3, 3)
            seen += n
        return round(edges[-1] * 1e3, 3)
