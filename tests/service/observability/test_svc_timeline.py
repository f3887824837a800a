"""The page's time series (service/observability/timeline.py): per-endpoint buckets in a ring that forgets what is older than
its span, percentiles from the buckets' histograms, and load/reload events."""

from __future__ import annotations

from xtag.service.observability.prometheus import LATENCY_BUCKETS
from xtag.service.observability.timeline import Timeline


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_buckets_per_endpoint_with_rates_and_percentiles():
    clock = Clock()
    tl = Timeline(LATENCY_BUCKETS, step_s=10, slots=6, clock=clock)
    for ms in range(1, 101):  # 1 … 100 ms
        tl.add("/v1/predict", 200 if ms <= 95 else 503, ms / 1e3)
    tl.add("/v1/labels", 404, 0.002)
    tl.add_batch(3)
    tl.add_batch(5)
    clock.t += 10
    tl.mark("tiny-b v2 (was v1)")
    s = tl.series(minutes=1)
    assert len(s["t"]) == 6 and s["t"][-1] == 1_000_010
    p = s["endpoints"]["/v1/predict"]
    assert p["qps"][-2:] == [10.0, 0.0] and p["p50"][-1] is None
    assert 40 <= p["p50"][-2] <= 60 and 85 <= p["p90"][-2] <= 100 and p["p90"][-2] <= p["p99"][-2] <= 100
    assert p["error_rate"][-2] == 0.05 and p["unavailable_rate"][-2] == 0.05
    assert s["endpoints"]["/v1/labels"]["error_rate"][-2] == 1.0
    assert s["batch"]["mean"][-2] == 4.0 and s["batch"]["max"][-2] == 5
    assert [e["text"] for e in s["events"]] == ["tiny-b v2 (was v1)"]


def test_the_ring_forgets_buckets_older_than_its_span():
    clock = Clock()
    tl = Timeline(LATENCY_BUCKETS, step_s=10, slots=6, clock=clock)
    tl.add("/v1/predict", 200, 0.001)
    clock.t += 60  # the same slot, a full turn later
    tl.add("/v1/predict", 200, 0.001)
    assert sum(tl.series(minutes=1)["endpoints"]["/v1/predict"]["qps"]) == 0.1  # one request, not two
    clock.t += 50
    assert tl.series(minutes=1)["endpoints"]["/v1/predict"]["qps"][0] == 0.1  # still inside: oldest bucket
    clock.t += 10
    assert tl.series(minutes=1)["endpoints"] == {}
