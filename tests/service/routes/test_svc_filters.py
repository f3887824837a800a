"""Per-request label filters: `exclude` and `include` on predict, batch, the per-model routes and Annif's suggest."""

from __future__ import annotations

import pytest
from xtag.models.label_texts import LabelText, LabelTexts

from tests.service.svc_support import bundles, client, make_client  # noqa: F401  (pytest fixtures)

TEXT = "python script module sql database query"


def names(body: dict) -> list[str]:
    return [label["name"] for label in body["labels"]]


@pytest.fixture
def plain(client) -> list[str]:
    return names(client.post("/v1/predict", json={"text": TEXT, "k": 9}).json())


def test_exclude_by_name_or_id_drops_those_labels(client, plain):
    model = client.app.state.registry.current
    top_id = model.names.index(plain[0])
    for exclude in ([plain[0], plain[2]], [top_id, plain[2]]):
        r = client.post("/v1/predict", json={"text": TEXT, "k": 3, "exclude": exclude})
        assert r.status_code == 200
        assert names(r.json()) == [plain[1], plain[3], plain[4]]
    named = client.post("/v1/models/tiny-a/predict", json={"text": TEXT, "k": 3, "exclude": [plain[0]]})
    assert names(named.json()) == plain[1:4]
    assert 'xtag_filtered_requests_total{model="tiny-a"} 3.0' in client.get("/metrics").text


def test_include_answers_only_those_and_fewer_than_k_when_few(client, plain):
    r = client.post("/v1/predict", json={"text": TEXT, "k": 5, "include": [plain[4], plain[1]]})
    assert r.status_code == 200 and names(r.json()) == [plain[1], plain[4]]
    both = client.post("/v1/predict", json={"text": TEXT, "k": 5, "include": [plain[1]], "exclude": [plain[1]]})
    assert both.status_code == 200 and both.json()["labels"] == []


def test_unknown_labels_are_a_422_naming_them(client):
    r = client.post("/v1/predict", json={"text": TEXT, "exclude": ["no-such", 999], "include": ["lang::c", "nope"]})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] == "urn:xtag:problem:validation-error"
    assert "'no-such'" in body["detail"] and "999" in body["detail"] and "'nope'" in body["detail"]
    assert body["unknown_labels"] == {"exclude": ["no-such", 999], "include": ["nope"]}
    huge = client.post("/v1/predict", json={"text": TEXT, "exclude": [2**70]})
    assert huge.status_code == 422 and huge.json()["unknown_labels"] == {"exclude": [str(2**70)]}
    floats = client.post("/v1/predict", json={"text": TEXT, "exclude": [1.5]})
    assert floats.status_code == 422


def test_a_filter_is_bounded_by_xtag_max_filter_labels(make_client):
    c = make_client(max_filter_labels=2)
    r = c.post("/v1/predict", json={"text": TEXT, "exclude": [0, 1, 2]})
    assert r.status_code == 422 and "XTAG_MAX_FILTER_LABELS" in r.json()["detail"]
    assert c.post("/v1/predict", json={"text": TEXT, "exclude": [0, 1]}).status_code == 200


def test_the_cost_estimate_counts_what_a_filter_fetches_and_scores():
    """An exclude fetches k + its size; a small include is scored label by label (counted as explained levels,
    the same path walk); so both cost more than the plain request, and more with more labels."""
    from xtag.service.http.cost import Work

    plain = Work(documents=1, characters=100, k=10, beam=10, level_nodes=(16, 256, 4096))
    fetched = Work(**{**plain.__dict__, "fetch": 1010})
    scored = Work(**{**plain.__dict__, "scored_labels": 1000})
    assert plain.cost() < fetched.cost() and plain.cost() < scored.cost()
    assert scored.cost() - plain.cost() > 100  # 1000 labels × 3 levels, as explained levels


def test_batch_filters_apply_to_every_document_and_documents_add_their_own(client, plain):
    docs = [{"text": TEXT}, {"text": TEXT, "exclude": [plain[1]]}, {"text": TEXT, "include": [plain[5]]}]
    r = client.post("/v1/predict/batch", json={"documents": docs, "k": 2, "exclude": [plain[0]]})
    assert r.status_code == 200
    results = [[label["name"] for label in doc["labels"]] for doc in r.json()["results"]]
    assert results == [[plain[1], plain[2]], [plain[2], plain[3]], [plain[5]]]
    bad = client.post("/v1/predict/batch", json={"documents": [{"text": TEXT, "include": ["nope"]}]})
    assert bad.status_code == 422 and bad.json()["unknown_labels"] == {"documents[0].include": ["nope"]}


def test_a_label_with_narrower_labels_filters_its_branch(client, plain):
    """With the bundle's label texts (Predictor.label_texts), `broader` makes a branch: excluding a label
    excludes its narrower labels too, including one includes them."""
    predictor = client.app.state.registry.current.bundle.predictor
    parent, child, grandchild = plain[0], plain[2], plain[3]
    predictor.label_texts = LabelTexts(
        [LabelText(parent), LabelText(child, broader=(parent,)), LabelText(grandchild, broader=(child,))]
    )
    try:
        r = client.post("/v1/predict", json={"text": TEXT, "k": 3, "exclude": [parent]})
        assert names(r.json()) == [plain[1], plain[4], plain[5]]
        r = client.post("/v1/predict", json={"text": TEXT, "k": 5, "include": [child]})
        assert names(r.json()) == [child, grandchild]
    finally:
        predictor.label_texts = None


def test_annif_suggest_takes_exclude_and_include_as_uris_or_names(client, plain):
    project = client.app.state.registry.current.served_as
    r = client.post(f"/v1/projects/{project}/suggest", data={"text": TEXT, "limit": 2, "exclude": plain[0]})
    assert r.status_code == 200 and [x["label"] for x in r.json()["results"]] == plain[1:3]
    r = client.post(f"/v1/projects/{project}/suggest", data={"text": TEXT, "include": f"{plain[3]}  {plain[2]}"})
    assert [x["label"] for x in r.json()["results"]] == [plain[2], plain[3]]
    batch = client.post(
        f"/v1/projects/{project}/suggest-batch?limit=1&exclude={plain[0]}", json={"documents": [{"text": TEXT}]}
    )
    assert batch.status_code == 200 and [x["label"] for x in batch.json()[0]["results"]] == [plain[1]]
    bad = client.post(f"/v1/projects/{project}/suggest", data={"text": TEXT, "exclude": "nope"})
    assert bad.status_code == 422 and bad.json()["unknown_labels"] == {"exclude": ["nope"]}


def test_annif_filters_take_the_uris_results_give(make_client, plain):
    c = make_client(annif_uri_prefix="http://example.org/tags/")
    project = c.app.state.registry.current.served_as
    r = c.post(
        f"/v1/projects/{project}/suggest",
        data={"text": TEXT, "limit": 1, "exclude": "http://example.org/tags/" + plain[0]},
    )
    assert r.status_code == 200 and r.json()["results"][0]["uri"] == "http://example.org/tags/" + plain[1]
