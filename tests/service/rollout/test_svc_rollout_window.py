"""The gates' window (service/rollout/window.py): per-version counts over the last window_s, in fixed memory."""

from __future__ import annotations

import pytest
from xtag.service.observability.prometheus import LATENCY_BUCKETS
from xtag.service.rollout.window import MAX_VERSIONS, SLICES, GateWindows


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_counts_only_tracked_models_and_forgets_them():
    w = GateWindows(LATENCY_BUCKETS, Clock())
    w.observe("m", "1", 200, 0.01)
    assert w.stats("m", "1").requests == 0  # no rollout: not counted
    w.track("m", 10.0)
    w.observe("m", "1", 200, 0.01)
    w.observe("m", "1", 503, 0.01)
    w.observe("m", "2", 500, 0.01)
    one, two = w.stats("m", "1"), w.stats("m", "2")
    assert (one.requests, one.errors, one.error_rate) == (2, 1, 0.5)
    assert (two.requests, two.errors) == (1, 1)
    w.forget("m")
    assert w.stats("m", "1").requests == 0 and "m" not in w.by_model


def test_answers_older_than_the_window_drop_out():
    clock = Clock()
    w = GateWindows(LATENCY_BUCKETS, clock)
    w.track("m", 10.0)
    for _ in range(5):
        w.observe("m", "1", 500, 0.01)
    clock.t += 5.0
    for _ in range(3):
        w.observe("m", "1", 200, 0.01)
    assert w.stats("m", "1").requests == 8
    clock.t += 6.0  # the first five are now over 10 s old
    stats = w.stats("m", "1")
    assert (stats.requests, stats.errors) == (3, 0)
    clock.t += 100.0
    assert w.stats("m", "1").requests == 0


def test_p99_reads_the_latency_histogram():
    w = GateWindows(LATENCY_BUCKETS, Clock())
    w.track("m", 10.0)
    for _ in range(990):
        w.observe("m", "fast", 200, 0.002)
    for _ in range(10):
        w.observe("m", "fast", 200, 0.4)
    for _ in range(100):
        w.observe("m", "slow", 200, 0.4)
    assert w.stats("m", "fast").p99_ms <= 2.0  # the 99th of 1000 answers is still a fast one
    assert 250 <= w.stats("m", "slow").p99_ms <= 500  # inside the 0.25-0.5 s bin
    assert w.stats("m", "none").p99_ms is None


def test_memory_is_bounded_whatever_the_traffic():
    clock = Clock()
    w = GateWindows(LATENCY_BUCKETS, clock)
    w.track("m", 1.0)
    for i in range(5000):
        clock.t += 0.01
        w.observe("m", str(i % (MAX_VERSIONS + 5)), 200, 0.001)
    versions = w.by_model["m"]
    assert len(versions) == MAX_VERSIONS
    assert all(len(v.requests) == SLICES for v in versions.values())


@pytest.mark.parametrize("window_s", [1.0, 60.0])
def test_retracking_starts_from_nothing(window_s):
    w = GateWindows(LATENCY_BUCKETS, Clock())
    w.track("m", 10.0)
    w.observe("m", "1", 500, 0.01)
    w.track("m", window_s)
    assert w.stats("m", "1").requests == 0
