"""/metrics (Prometheus) and /v1/stats (dashboard feed) report what the service did."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.service.svc_support import ADMIN, ADMIN_KEY, bundles, client, make_client  # noqa: F401  (pytest fixtures)


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_requests_per_endpoint_and_status(client):
    for _ in range(3):
        client.post("/v1/predict", json={"text": "python script", "k": 2})
    client.post("/v1/predict", json={"text": ""})
    client.post("/v1/predict/batch", json={"documents": [{"text": "a b"}, {"text": "sql"}, {"text": "game"}]})
    client.get("/nowhere")
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    s = samples(r.text)

    def key(ep, st, m="POST", model="tiny-a"):  # a request refused before a model was chosen has model ""
        return (("endpoint", ep), ("method", m), ("model", model), ("status", st), ("version", "1" if model else ""))

    assert s[("xtag_http_requests_total", key("/v1/predict", "200"))] == 3
    assert s[("xtag_http_requests_total", key("/v1/predict", "422", model=""))] == 1
    assert s[("xtag_http_requests_total", key("/v1/predict/batch", "200"))] == 1
    assert s[("xtag_http_requests_total", key("unmatched", "404", "GET", ""))] == 1
    assert s[("xtag_http_request_duration_seconds_count", key("/v1/predict", "200"))] == 3
    inf = tuple(sorted(key("/v1/predict", "200") + (("le", "+Inf"),)))
    assert s[("xtag_http_request_duration_seconds_bucket", inf)] == 3
    model = (("model", "tiny-a"),)
    assert s[("xtag_predict_batch_documents_sum", model)] == 3 + 3  # three single requests and one batch of 3
    assert s[("xtag_predict_batch_documents_bucket", (("le", "4.0"), *model))] == 4
    assert s[("xtag_predicted_documents_total", model)] == 6
    assert s[("xtag_http_requests_in_flight", ())] == 1  # the /metrics request itself
    info = [k for k in s if k[0] == "xtag_model_info"]
    assert len(info) == 1 and dict(info[0][1])["name"] == "tiny-a" and s[info[0]] == 1
    assert dict(info[0][1])["labels"] == "9" and dict(info[0][1])["model"] == "tiny-a"
    assert s[("xtag_model_load_seconds", model)] > 0


def test_model_info_follows_a_reload(make_client, bundles):
    client = make_client(admin_key=ADMIN_KEY)
    assert client.post("/v1/admin/reload", json={"bundle": str(bundles["b"])}, headers=ADMIN).status_code == 200
    info = {dict(k[1])["name"]: v for k, v in samples(client.get("/metrics").text).items() if k[0] == "xtag_model_info"}
    assert info == {"tiny-b": 1.0}


def test_stats_feed_has_qps_percentiles_errors_and_top_labels(client):
    for _ in range(4):
        client.post("/v1/predict", json={"text": "sql database query", "k": 1})
    client.post("/v1/predict", json={"text": "sql", "k": 0})
    st = client.get("/v1/stats").json()
    assert st["requests"] == 5 and st["errors_4xx"] == 1 and st["errors_5xx"] == 0
    assert st["error_rate"] == 0.2 and st["qps"] > 0
    assert 0 < st["latency_ms"]["p50"] <= st["latency_ms"]["p90"] <= st["latency_ms"]["p99"]
    assert st["top_labels"][0] == {"id": 7, "name": "works-with::db", "count": 4}
    assert st["model"]["name"] == "tiny-a" and st["model"]["label_count"] == 9
    # the dashboard's own polling does not count as traffic
    assert client.get("/v1/stats").json()["requests"] == 5


def test_stats_window_forgets_old_requests_and_wraps_around():
    from xtag.service.observability.prometheus import RecentRequests

    r = RecentRequests(window=60, capacity=8)
    for i in range(20):  # more than the capacity: only the last 8 remain
        r.add(0.001 * (i + 1), 200 if i % 4 else 500)
    s = r.summary()
    assert s["requests"] == 8 and s["errors_5xx"] == 2 and s["latency_ms"]["p50"] == 16.5
    r.times[:] -= 61  # everything is now older than the window
    assert r.summary()["requests"] == 0 and r.summary()["latency_ms"]["p50"] is None


def test_static_files_are_counted_under_their_mount_not_as_unmatched(client):
    """The dashboard's files (/static/*) and the reference pages' assets (/static/docs/*) are labelled by the
    mount that serves them, a missing file included; a path no route serves stays "unmatched"."""
    for path in ("/static/app.js", "/static/style.css", "/static/nope.js", "/static/docs/swagger-ui.css", "/nowhere"):
        client.get(path)
    s = samples(client.get("/metrics").text)
    counts = {
        (dict(k[1])["endpoint"], dict(k[1])["status"]): v
        for k, v in s.items()
        if k[0] == "xtag_http_requests_total"
        and dict(k[1])["method"] == "GET"
        and dict(k[1])["endpoint"] not in ("/metrics", "/ready")
    }
    assert counts == {("/static", "200"): 2, ("/static", "404"): 1, ("/static/docs", "200"): 1, ("unmatched", "404"): 1}


PER_MODEL = (
    "xtag_http_request_duration",
    "xtag_http_requests_total",
    "xtag_predict",
    "xtag_label_drift",
    "xtag_model_",
)


def test_every_prediction_series_names_the_model(make_client, bundles):
    """Each series about predictions carries `model`, the name the model is served under, so that a server with
    several models (or one whose model changes) is charted per model; the request series of a prediction carry
    the model that answered it."""
    c = make_client(admin_key=ADMIN_KEY)
    c.post("/v1/predict", json={"text": "python script", "k": 3})
    c.post("/v1/predict/batch", json={"documents": [{"text": "sql"}], "k": 3})
    c.get("/v1/drift")  # publishes the drift gauges (a reload then starts an empty window)
    c.post("/v1/admin/reload", json={}, headers=ADMIN)
    found = [(name, labels) for (name, labels) in samples(c.get("/metrics").text) if name.startswith(PER_MODEL)]
    assert {name.rsplit("_", 1)[0] for name, _ in found} >= {
        "xtag_predict_batch_documents",
        "xtag_predicted_documents",
        "xtag_label_drift_js",
        "xtag_model_reloads",
        "xtag_model_load",
        "xtag_http_request_duration_seconds",
    }
    for name, labels in found:
        assert "model" in dict(labels), name
    predicted = [dict(labels)["model"] for name, labels in found if name.startswith("xtag_predict")]
    assert set(predicted) == {"tiny-a"}
    answered = {dict(lb)["endpoint"]: dict(lb)["model"] for name, lb in found if name == "xtag_http_requests_total"}
    assert answered["/v1/predict"] == answered["/v1/predict/batch"] == "tiny-a"
