"""Admission by cost (service/http/cost.py): a request that would buy seconds of CPU or a huge answer is refused
with 413 before any prediction; ordinary requests pass; XTAG_MAX_REQUEST_COST and XTAG_MAX_RESPONSE_BYTES move
the bound; the Annif routes are bounded too."""

from __future__ import annotations

import logging

import pytest
from xtag.service.http import cost
from xtag.service.http.cost import Work, check_work, response_bytes
from xtag.service.http.problems import Problem
from xtag.service.state.model_slot import ServedModel

from tests.service.svc_support import bundles, make_client, synthetic_bundle  # noqa: F401  (pytest fixtures)

TEXT = "python interpreter script module pip package database sql query table " * 5  # ~350 characters


@pytest.fixture(scope="module")
def wide_bundle(tmp_path_factory):
    """2,000 labels: enough for k = 1000, the issue's amplification request (random rankers, built in seconds)."""
    return synthetic_bundle(tmp_path_factory.mktemp("cost"), "wide", labels=2000, features=2000, density=0.02)


@pytest.fixture
def predictions(monkeypatch):
    """Counts the predictor calls, to show a refusal came before any."""
    calls = []
    real = ServedModel.predict

    def counting(self, texts, *args, **kwargs):
        calls.append(len(texts))
        return real(self, texts, *args, **kwargs)

    monkeypatch.setattr(ServedModel, "predict", counting)
    return calls


def batch(n: int, text: str = TEXT, **options) -> dict:
    return {"documents": [{"text": f"{text} {i}"} for i in range(n)], **options}


def test_the_amplification_request_is_refused_before_any_prediction(make_client, wide_bundle, predictions):
    c = make_client(bundle=wide_bundle)
    predictions.clear()  # the warm-up's
    r = c.post("/v1/predict/batch", json=batch(256, k=1000, beam_size=512, explain=True))
    assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["type"] == "urn:xtag:problem:too-costly"
    assert "XTAG_MAX_REQUEST_COST" in problem["detail"] and problem["cost"] > problem["limit"] == 1000
    assert "fewer documents (sent 256)" in problem["detail"] and "no explain" in problem["detail"]
    assert predictions == []


def test_ordinary_requests_pass(make_client, wide_bundle):
    c = make_client(bundle=wide_bundle)
    r = c.post("/v1/predict/batch", json=batch(256, k=100))
    assert r.status_code == 200 and len(r.json()["results"]) == 256
    long_text = " ".join(f"w{j}" for j in range(0, 2000, 3)) * 4  # ~2,700 words
    r = c.post("/v1/predict", json={"text": long_text, "k": 10, "explain": True})
    assert r.status_code == 200 and all("explanation" in label for label in r.json()["labels"])
    assert c.post("/v1/predict/batch", json=batch(64, k=10, explain=True)).status_code == 200


def _cost(model: ServedModel, body: dict) -> float:
    texts = [d["text"] for d in body["documents"]]
    k, explain = body["k"], body.get("explain", False)
    return Work(len(texts), sum(map(len, texts)), k, model.default_beam, model.level_nodes, explain=explain).cost()


def test_the_setting_moves_the_bound(make_client):
    body = batch(32, k=5, explain=True)
    c = make_client()
    cost = _cost(c.app.state.registry.current, body)
    assert c.post("/v1/predict/batch", json=body).status_code == 200  # the default admits it
    low = make_client(max_request_cost=cost * 0.9)
    r = low.post("/v1/predict/batch", json=body)
    assert r.status_code == 413 and "XTAG_MAX_REQUEST_COST" in r.json()["detail"]
    assert low.post("/v1/predict/batch", json=batch(2, k=5)).status_code == 200  # a cheaper one still passes
    assert make_client(max_request_cost=cost * 1.1).post("/v1/predict/batch", json=body).status_code == 200


def test_the_response_size_is_capped(make_client):
    c = make_client(max_response_bytes=20_000)
    r = c.post("/v1/predict/batch", json=batch(32, k=5, explain=True))
    assert r.status_code == 413 and "XTAG_MAX_RESPONSE_BYTES=20000" in r.json()["detail"]
    assert r.json()["response_bytes"] > 20_000
    ok = c.post("/v1/predict/batch", json=batch(2, k=5, explain=True))
    assert ok.status_code == 200 and len(ok.content) < 20_000


def test_annif_routes_are_bounded_too(make_client):
    model = make_client().app.state.registry.current
    small = Work(1, 6, 3, model.default_beam, model.level_nodes, hint=model.cost_hint, annif=True).cost()
    c = make_client(max_request_cost=small * 1.5)  # the last request below passes, the others cost more
    r = c.post("/v1/projects/tiny-a/suggest-batch?limit=9", json={"documents": [{"text": TEXT}] * 64})
    assert r.status_code == 413 and r.json()["type"] == "urn:xtag:problem:too-costly"
    r = c.post("/v1/projects/tiny-a/suggest", data={"text": TEXT * 200, "limit": "9"})
    assert r.status_code == 413 and "XTAG_MAX_REQUEST_COST" in r.json()["detail"]
    assert c.post("/v1/projects/tiny-a/suggest", data={"text": "python", "limit": "3"}).status_code == 200


def test_each_knob_raises_the_cost():
    base = dict(documents=8, characters=8 * 400, k=10, beam=10, level_nodes=(64, 2000))
    cost = Work(**base).cost()
    for change in (
        {"documents": 64, "characters": 64 * 400},
        {"characters": 8 * 4000},
        {"k": 100},
        {"beam": 512},
        {"explain": True},
        {"reweight": True},
        {"optimize": True},
    ):
        assert Work(**{**base, **change}).cost() > cost, change
    # explaining multiplies by the labels explained: 256 documents at k = 1000 is far over the default budget
    assert Work(**{**base, "documents": 256, "k": 1000, "explain": True}).cost() > 10 * 1000


def test_a_disabled_limit_admits_anything():
    work = Work(256, 256 * 400, 1000, 512, (64, 2000), explain=True)
    check_work(work, 60.0, 0, 0)  # 0 = no bound, for either
    with pytest.raises(Problem):
        check_work(work, 60.0, 1000, 0)


def _sent(model: ServedModel, n: int, k: int, **flags) -> Work:
    texts = [f"{TEXT} {i}" for i in range(n)]
    return Work(n, sum(map(len, texts)), k, model.default_beam, model.level_nodes, hint=model.cost_hint, **flags)


def test_the_answer_size_is_estimated_with_gains_and_annif_results(make_client, wide_bundle):
    """Issue 47: reweighted answers (each label's `gain`) and Annif's results were under-counted, and passed the
    8 MiB bound at 9.9 and 10.4 MB. The estimate must be at least what is sent."""
    c = make_client(bundle=wide_bundle, max_request_cost=0, max_request_memory_mb=0)
    model = c.app.state.registry.current
    r = c.post("/v1/predict/batch", json=batch(16, k=400, reweight={"scheme": "psp", "alpha": 0.5}))
    assert r.status_code == 200 and '"gain"' in r.text
    assert len(r.content) <= response_bytes(_sent(model, 16, 400, reweight=True), model.label_bytes)
    r = c.post("/v1/projects/wide/suggest-batch?limit=400", json={"documents": [{"text": TEXT}] * 16})
    assert r.status_code == 200 and 300 <= len(r.json()[0]["results"]) <= 400  # the beam finds most of 400
    assert len(r.content) <= response_bytes(_sent(model, 16, 400, annif=True), 2 * model.label_bytes)


def test_the_encoded_answer_is_held_to_the_limit_whatever_the_estimate(make_client, monkeypatch):
    monkeypatch.setattr(cost, "response_bytes", lambda work, per_label: 0.0)  # an estimate that misses everything
    c = make_client(max_response_bytes=2_000)
    r = c.post("/v1/predict/batch", json=batch(32, k=5, explain=True))
    assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"
    assert "XTAG_MAX_RESPONSE_BYTES=2000" in r.json()["detail"] and r.json()["response_bytes"] > 2_000
    r = c.post("/v1/projects/tiny-a/suggest-batch?limit=9", json={"documents": [{"text": TEXT}] * 32})
    assert r.status_code == 413 and "XTAG_MAX_RESPONSE_BYTES" in r.json()["detail"]
    assert c.post("/v1/predict", json={"text": "python", "k": 2}).status_code == 200


def test_the_memory_bound_refuses_before_any_prediction(make_client, wide_bundle, predictions):
    c = make_client(bundle=wide_bundle, max_request_cost=0)
    model = c.app.state.registry.current
    body = batch(64, k=400, explain=True)
    mb = _sent(model, 64, 400, explain=True).memory_mb()
    assert mb > 0
    low = make_client(bundle=wide_bundle, max_request_cost=0, max_request_memory_mb=mb * 0.9)
    predictions.clear()  # the warm-up's
    r = low.post("/v1/predict/batch", json=body)
    assert r.status_code == 413 and "XTAG_MAX_REQUEST_MEMORY_MB" in r.json()["detail"]
    assert r.json()["memory_mb"] > r.json()["limit"] and predictions == []


def test_a_request_costlier_than_twice_its_estimate_is_logged_and_counted(make_client, monkeypatch, caplog):
    c = make_client(max_request_cost=0)  # no bound: the estimates below admit anything
    name = c.app.state.registry.current.served_as

    def counted() -> float:
        sample = c.app.state.metrics.registry.get_sample_value(
            "xtag_cost_underestimated_requests_total", {"model": name}
        )
        return sample or 0.0

    before = counted()
    monkeypatch.setattr(Work, "cost", lambda self: 1e6)  # an estimate above any work (no bound set): silence
    assert c.post("/v1/predict/batch", json=batch(8, k=5)).status_code == 200
    assert counted() == before
    monkeypatch.setattr(Work, "cost", lambda self: 1e-6)  # an estimate far below any work
    monkeypatch.setattr(cost, "CHECK_MIN_MS", 0.0)  # however short this tiny model's work is
    with caplog.at_level(logging.WARNING, logger="xtag.service"):
        assert c.post("/v1/predict/batch", json=batch(8, k=5, explain=True)).status_code == 200
    assert counted() == before + 1
    assert any("cost estimate exceeded" in m and "8 documents" in m for m in caplog.messages)
