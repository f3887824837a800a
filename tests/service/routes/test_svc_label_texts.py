"""What the bundle's label file says, served: /v1/labels' fields and search, `label_text` on predict, batch and the
per-model routes, Annif's `label`; a bundle without a label file answers exactly as before."""

from __future__ import annotations

import pytest

from tests.service.svc_support import bundles, make_client  # noqa: F401  (pytest fixtures)

SHOOTER = "shooter weapons arena frag multiplayer"


@pytest.fixture
def texts_client(make_client, tiny_texts_bundle):
    return make_client(bundle=tiny_texts_bundle[1])


def labels(client, **params) -> dict:
    r = client.get("/v1/labels", params={"limit": 1000, **params})
    assert r.status_code == 200, r.text
    return {row["name"]: row for row in r.json()["labels"]}


def test_labels_say_what_the_label_file_says(texts_client):
    rows = labels(texts_client)
    fps = rows["game::fps"]
    assert fps["label"] == "First-person shooters" and fps["alt_labels"] == ["Ego shooters"]
    assert fps["broader"] == ["game"] and "description" not in fps
    assert rows["sci::bio"]["description"] == "Genomes and proteins."
    assert (
        set(rows["lang::c"]) == set(rows["role::tail"]) == {"id", "name", "frequency"}
    )  # nothing said; not in the file
    assert "game" not in rows  # a label of the file that the model has no column for


def test_labels_search_names_and_alt_labels(texts_client):
    assert set(labels(texts_client, q="first-PERSON")) == {"game::fps"}
    assert set(labels(texts_client, q="ego shoot")) == {"game::fps"}
    assert set(labels(texts_client, q="puzz")) == {"game::puzzle"}  # id and name alike, listed once
    assert labels(texts_client, q="genomes") == {}  # descriptions are not searched


def test_labels_of_a_bundle_without_a_label_file_are_unchanged(make_client):
    client = make_client()
    assert all(set(row) == {"id", "name", "frequency"} for row in labels(client).values())


def test_label_text_on_predict_batch_and_named_routes(texts_client):
    plain = texts_client.post("/v1/predict", json={"text": SHOOTER, "k": 3}).json()["labels"]
    assert all(set(label) == {"id", "name", "score"} for label in plain)
    shown = texts_client.post("/v1/predict", json={"text": SHOOTER, "k": 3, "label_text": True}).json()["labels"]
    assert [(x["id"], x["name"], x["score"]) for x in shown] == [(x["id"], x["name"], x["score"]) for x in plain]
    assert shown[0] == {**plain[0], "label": "First-person shooters", "description": None}
    assert list(shown[0]) == ["id", "name", "label", "description", "score"]
    by_name = {x["name"]: x for x in shown}
    body = {"documents": [{"text": SHOOTER}, {"text": "puzzle tiles solve logic"}], "k": 2, "label_text": True}
    results = texts_client.post("/v1/predict/batch", json=body).json()["results"]
    assert results[0]["labels"][0] == by_name["game::fps"]
    puzzle = results[1]["labels"][0]
    assert (puzzle["name"], puzzle["label"], puzzle["description"]) == (
        "game::puzzle",
        "Puzzles",
        'Tiles & logic, "quoted".',
    )
    name = texts_client.get("/v1/models").json()["models"][0]["name"]
    named = texts_client.post(f"/v1/models/{name}/predict", json={"text": SHOOTER, "k": 3, "label_text": True})
    assert named.json()["labels"] == shown


def test_label_text_with_explain_and_reweight(texts_client):
    body = {"text": SHOOTER, "k": 2, "label_text": True, "explain": True}
    first = texts_client.post("/v1/predict", json=body).json()["labels"][0]
    assert first["label"] == "First-person shooters" and "explanation" in first
    body = {"text": SHOOTER, "k": 2, "label_text": True, "reweight": {"scheme": "psp", "alpha": 0.5}}
    assert all(
        {"label", "description", "gain"} <= set(x) for x in texts_client.post("/v1/predict", json=body).json()["labels"]
    )


def test_label_text_without_a_label_file_shows_the_id(make_client):
    labels = make_client().post("/v1/predict", json={"text": "sql database query", "label_text": True}).json()["labels"]
    assert all(x["label"] == x["name"] and x["description"] is None for x in labels)


def test_annif_shows_the_label_name_and_keeps_the_id_in_the_uri(texts_client):
    project = texts_client.get("/v1/projects").json()["projects"][0]["project_id"]
    results = texts_client.post(f"/v1/projects/{project}/suggest", data={"text": SHOOTER, "limit": 2}).json()["results"]
    assert results[0]["label"] == "First-person shooters" and results[0]["uri"].endswith("game::fps")
    body = {"documents": [{"text": SHOOTER}]}
    batch = texts_client.post(f"/v1/projects/{project}/suggest-batch", params={"limit": 2}, json=body)
    assert batch.json()[0]["results"] == results


def test_openapi_states_the_option_and_the_fields(texts_client):
    schemas = texts_client.get("/openapi.json").json()["components"]["schemas"]
    for request in ("PredictRequest", "BatchRequest"):
        assert schemas[request]["properties"]["label_text"]["type"] == "boolean"
    assert {"label", "description"} <= set(schemas["LabelScore"]["properties"])
    assert {"label", "description", "alt_labels", "broader"} <= set(schemas["LabelInfo"]["properties"])


def test_the_answer_size_estimate_counts_the_label_texts(texts_client):
    from xtag.service.http.cost import Work, response_bytes

    model = texts_client.app.state.registry.current
    texts = [f"{SHOOTER} {i}" for i in range(8)]
    body = {"documents": [{"text": t} for t in texts], "k": model.n_labels, "label_text": True}
    r = texts_client.post("/v1/predict/batch", json=body)
    assert r.status_code == 200 and '"description"' in r.text
    work = Work(8, sum(map(len, texts)), model.n_labels, model.default_beam, model.level_nodes, hint=model.cost_hint)
    assert model.text_bytes > 0
    estimate = response_bytes(work, model.label_bytes + model.text_bytes)
    assert len(r.content) <= 1.01 * estimate  # its envelope (ids, model, took_ms) is not counted, as in every answer
    assert estimate - response_bytes(work, model.label_bytes) == 8 * model.n_labels * model.text_bytes
