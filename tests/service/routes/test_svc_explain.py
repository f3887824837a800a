"""`"explain": true` on /v1/predict and /v1/predict/batch: explanations beside today's payload, which stays as it was."""

from __future__ import annotations

import re

import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.explain.linear import Explainer
from xtag.service.schemas import Explanation

from tests.service.svc_support import bundles, client, make_client  # noqa: F401  (pytest fixtures)

TEXT = "python script game arcade"
DOCS = [{"id": "x", "text": TEXT}, {"text": "sql database query"}, {"text": "audio music player"}]


def without_explanations(labels: list[dict]) -> list[dict]:
    return [{key: value for key, value in label.items() if key != "explanation"} for label in labels]


def test_explain_off_returns_exactly_todays_payload(client):
    plain = client.post("/v1/predict", json={"text": TEXT, "k": 4})
    off = client.post("/v1/predict", json={"text": TEXT, "k": 4, "explain": False})
    assert plain.json()["labels"] == off.json()["labels"]
    for label in plain.json()["labels"]:
        assert set(label) == {"id", "name", "score"}
    # byte for byte, apart from the timing
    strip = lambda r: re.sub(rb'"took_ms":[0-9.e-]+', b"", r.content)  # noqa: E731
    assert strip(plain) == strip(off)


def test_explain_adds_an_explanation_to_each_returned_label(client, bundles):
    plain = client.post("/v1/predict", json={"text": TEXT, "k": 4, "threshold": 0.2}).json()["labels"]
    r = client.post("/v1/predict", json={"text": TEXT, "k": 4, "threshold": 0.2, "explain": True})
    assert r.status_code == 200
    labels = r.json()["labels"]
    assert without_explanations(labels) == plain  # same labels, same score digits
    predictor = load_bundle(bundles["a"]).predictor
    expected = Explainer.for_predictor(predictor).explain([TEXT], [[x["id"] for x in plain]])[0]
    assert [x["explanation"] for x in labels] == expected
    for label in labels:
        e = Explanation.model_validate(label["explanation"])  # the documented schema, every field
        assert set(label["explanation"]) == {"words", "path_score", "levels"}  # a LaMP bundle's add more
        assert {w.term for w in e.words} <= set(TEXT.split()) | {
            " ".join(p) for p in zip(TEXT.split(), TEXT.split()[1:])
        }
    assert labels[0]["explanation"]["words"], "the best label is credited to some word of the text"


def test_batch_explains_every_document_as_single_requests_do(client):
    plain = client.post("/v1/predict/batch", json={"documents": DOCS, "k": 3}).json()["results"]
    r = client.post("/v1/predict/batch", json={"documents": DOCS, "k": 3, "explain": True})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["id"] for x in results] == ["x", "1", "2"]
    assert [without_explanations(x["labels"]) for x in results] == [x["labels"] for x in plain]
    single = [client.post("/v1/predict", json={"text": d["text"], "k": 3, "explain": True}).json() for d in DOCS]
    assert [x["labels"] for x in results] == [s["labels"] for s in single]


def test_batch_optimize_and_reweight_explain_the_labels_they_return(client):
    opt = {"metric": "macro-f1", "alpha": 1.0}
    body = {"documents": DOCS, "k": 2, "optimize": opt}
    plain = client.post("/v1/predict/batch", json=body).json()["results"]
    explained = client.post("/v1/predict/batch", json={**body, "explain": True}).json()["results"]
    assert [without_explanations(x["labels"]) for x in explained] == [x["labels"] for x in plain]
    rw = {"text": TEXT, "k": 3, "reweight": {"scheme": "psp", "alpha": 0.5}}
    labels = client.post("/v1/predict", json={**rw, "explain": True}).json()["labels"]
    assert without_explanations(labels) == client.post("/v1/predict", json=rw).json()["labels"]
    assert all("explanation" in x for x in labels)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_explain_must_be_a_boolean(client, value):
    r = client.post("/v1/predict", json={"text": TEXT, "explain": value})
    assert r.status_code == 422 and "explain" in r.json()["detail"]


def test_a_bundle_without_tfidf_features_refuses_explain_with_a_422(make_client, lightxml_bundle):
    _, bundle = lightxml_bundle
    c = make_client(bundle=bundle)
    assert c.post("/v1/predict", json={"text": TEXT, "k": 2}).status_code == 200
    for path, body in (("/v1/predict", {"text": TEXT}), ("/v1/predict/batch", {"documents": DOCS})):
        r = c.post(path, json={**body, "explain": True})
        assert r.status_code == 422, r.text
        problem = r.json()
        assert problem["type"] == "urn:xtag:problem:explain-unavailable"
        assert "no TF-IDF features" in problem["detail"] and "lightxml" in problem["detail"]
