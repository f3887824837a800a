"""/v1/predict/batch "optimize": batch-level macro inference through the same core as `xtag evaluate --optimize`."""

from __future__ import annotations

from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.macro_optimal import predict_optimized, serving_config

from tests.service.svc_support import bundles, client, make_client, tiny_corpus  # noqa: F401  (pytest fixtures)


def batch(n: int = 40) -> list[dict]:
    return [{"id": f"d{i}", "text": row["text"]} for i, row in enumerate(tiny_corpus(variant=1)[:n])]


def test_optimize_returns_the_joint_top_k_in_input_order(client, bundles):
    docs = batch()
    r = client.post(
        "/v1/predict/batch", json={"documents": docs, "k": 2, "optimize": {"metric": "macro-f1", "alpha": 1.0}}
    )
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["id"] for x in results] == [d["id"] for d in docs]
    predictor = load_bundle(bundles["a"]).predictor
    expected = predict_optimized(
        predictor,
        [d["text"] for d in docs],
        2,
        predictor.model.config.beam_size,
        predictor.n_labels,
        serving_config("macro-f1", 1.0),
    )
    got = [[label["id"] for label in x["labels"]] for x in results]
    assert got == [[j for j in row if j >= 0] for row in expected.labels.tolist()]


def test_optimize_spreads_predictions_over_more_labels_than_plain_top_k(client):
    docs = batch()
    plain = client.post("/v1/predict/batch", json={"documents": docs, "k": 1}).json()["results"]
    opt = client.post(
        "/v1/predict/batch", json={"documents": docs, "k": 1, "optimize": {"metric": "macro-recall", "alpha": 1.0}}
    ).json()["results"]
    distinct = lambda rows: len({label["id"] for x in rows for label in x["labels"]})  # noqa: E731
    assert distinct(opt) >= distinct(plain)


def test_optimize_rejects_bad_parameters_and_combination_with_reweight(client):
    docs = batch(3)
    for bad in ({"metric": "accuracy"}, {"metric": "macro-f1", "alpha": 2}, {"metric": "macro-f1", "x": 1}):
        r = client.post("/v1/predict/batch", json={"documents": docs, "optimize": bad})
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    r = client.post(
        "/v1/predict/batch",
        json={"documents": docs, "optimize": {"metric": "macro-f1"}, "reweight": {"scheme": "psp", "alpha": 0.5}},
    )
    assert r.status_code == 422 and "alternatives" in r.json()["detail"]
    assert r.json()["status"] == 422
