"""Label drift (issue 27): a skewed stream of predictions raises the divergence and names the right risers, in
/v1/drift and in /metrics; the metrics follow Prometheus conventions (fine latency buckets, an _info metric, no
label names as metric labels)."""

from __future__ import annotations

import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from xtag.service.observability.drift import LabelDrift, jensen_shannon
from xtag.service.observability.prometheus import LATENCY_BUCKETS

from tests.service.svc_support import bundles, make_client, tiny_corpus, wait_ready  # noqa: F401  (pytest fixtures)

GAME = "game player level arcade puzzle fun"


def test_jensen_shannon_bounds():
    p = np.array([0.5, 0.5, 0.0, 0.0])
    assert jensen_shannon(p, p) == 0
    assert abs(jensen_shannon(p, np.array([0.0, 0.0, 0.5, 0.5])) - 1) < 1e-12
    assert 0 < jensen_shannon(p, np.array([0.25, 0.25, 0.25, 0.25])) < 1


def test_the_window_is_bounded_and_forgets_old_labels():
    drift = LabelDrift(np.array([10, 10, 10, 10]), capacity=100)
    drift.add(np.zeros(100, dtype=np.int64), 100)  # only label 0
    names = ["a", "b", "c", "d"]
    assert drift.summary(names)["risers"][0]["name"] == "a"
    drift.add(np.tile(np.arange(4), 25), 25)  # the training distribution, a full window of it
    after = drift.summary(names)
    assert after["window_labels"] == 100 and after["js_divergence"] == 0 and after["risers"] == []


def metric_samples(text: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def test_a_skewed_stream_raises_the_divergence_and_names_the_risers(make_client):
    c = make_client()
    for row in tiny_corpus():  # traffic like the training data
        assert c.post("/v1/predict", json={"text": row["text"], "k": 2}).status_code == 200
    before = c.get("/v1/drift").json()
    for _ in range(80):  # then one narrow topic
        assert c.post("/v1/predict", json={"text": GAME, "k": 1}).status_code == 200
    after = c.get("/v1/drift", params={"top": 3}).json()
    assert after["js_divergence"] > before["js_divergence"] + 0.05
    assert after["risers"][0]["name"] == "use::gaming"
    assert after["risers"][0]["served_share"] > 2 * after["risers"][0]["train_share"]
    assert all(r["name"] != "use::gaming" for r in after["fallers"])
    assert abs(sum(b["served"] for b in after["bands"].values()) - 1) < 1e-5
    assert after["documents"] == before["documents"] + 80

    samples = metric_samples(c.get("/metrics").text)
    js = [s.value for s in samples if s.name == "xtag_label_drift_js_divergence"]
    assert js == [after["js_divergence"]]
    bands = {s.labels["band"]: s.value for s in samples if s.name == "xtag_predicted_label_band_share"}
    assert set(bands) == {"head", "torso", "tail"}

    # bounded cardinality: no metric carries a label name (the tag vocabulary) as a label value
    names = {x["name"] for x in c.get("/v1/labels", params={"limit": 100}).json()["labels"]}
    assert len(names) == 9
    assert not {v for s in samples for v in s.labels.values()} & names
    info = [s for s in samples if s.name == "xtag_model_info"]
    assert len(info) == 1 and info[0].labels["name"] == "tiny-a" and info[0].value == 1


def test_latency_buckets_resolve_half_a_millisecond_to_a_hundred():
    inside = [b for b in LATENCY_BUCKETS if 0.0005 <= b <= 0.1]
    assert inside[0] == 0.0005 and inside[-1] == 0.1
    assert all(b / a <= 2 for a, b in zip(inside, inside[1:], strict=False))


def test_drift_and_the_time_series_are_per_model(make_client, bundles):
    """Two models: traffic on one moves its drift and its time series only; /metrics has a drift series per model,
    /v1/drift and /v1/timeline take ?model= (default: the default model), an unknown name is a 404 listing names."""
    c = make_client(models=f"tiny-b={bundles['b']}")
    wait_ready(c, path="/v1/models/tiny-b/ready")
    for _ in range(20):
        assert c.post("/v1/models/tiny-b/predict", json={"text": GAME, "k": 1}).status_code == 200
    assert c.post("/v1/predict", json={"text": "sql database query", "k": 1}).status_code == 200
    b, a = c.get("/v1/drift", params={"model": "tiny-b"}).json(), c.get("/v1/drift").json()
    assert b["documents"] == 20 and b["risers"][0]["name"] == "use::gaming" and b["model"]["name"] == "tiny-b"
    assert a["documents"] == 1 and a["model"]["name"] == "tiny-a"
    js = {s.labels["model"]: s.value for s in metric_samples(c.get("/metrics").text)
          if s.name == "xtag_label_drift_js_divergence"}  # fmt: skip
    assert js == {"tiny-a": a["js_divergence"], "tiny-b": b["js_divergence"]}
    tb, ta = c.get("/v1/timeline", params={"model": "tiny-b"}).json(), c.get("/v1/timeline").json()
    assert ta["model"] == "tiny-a" and {"tiny-a", "tiny-b"} <= set(ta["models"])
    assert sum(tb["endpoints"]["/v1/models/{name}/predict"]["qps"]) * tb["step_s"] == 20
    assert "/v1/models/{name}/predict" not in ta["endpoints"] and "/v1/predict" in ta["endpoints"]
    missing = c.get("/v1/drift", params={"model": "nope"})
    assert missing.status_code == 404 and missing.json()["models"] == ["tiny-a", "tiny-b"]
