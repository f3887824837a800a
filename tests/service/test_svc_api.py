"""The JSON API on a tiny bundle: predict, batch order and ids, threshold, reweighting, labels, model, OpenAPI."""

from __future__ import annotations

import re

from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.reweighting import gains_for, label_weights, predict_reweighted

from tests.service.svc_support import bundles, client, make_client  # noqa: F401  (pytest fixtures)

TAIL_TEXT = "quasar telescope image tool"


def test_predict_returns_the_predictors_top_k(client, bundles):
    r = client.post("/v1/predict", json={"text": "python script game", "k": 3})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    predictor = load_bundle(bundles["a"]).predictor
    expected = predictor.named(predictor.predict(["python script game"], k=3))[0]
    assert [(x["id"], x["name"]) for x in body["labels"]] == [(i, n) for i, n, _ in expected]
    assert [x["score"] for x in body["labels"]] == [float(s) for _, _, s in expected]
    assert body["model"] == {"name": "tiny-a", "version": load_bundle(bundles["a"]).version, "served_version": "1"}
    assert r.headers["x-model-version"] == "1"
    assert body["took_ms"] > 0


def test_default_k_is_capped_at_the_label_count(client):
    r = client.post("/v1/predict", json={"text": "python script game"})  # default k=10, the bundle has 9 labels
    assert r.status_code == 200 and len(r.json()["labels"]) == 9


def test_threshold_drops_low_scores(client):
    full = client.post("/v1/predict", json={"text": "python script game", "k": 9}).json()["labels"]
    cut = sorted(x["score"] for x in full)[4]
    kept = client.post("/v1/predict", json={"text": "python script game", "k": 9, "threshold": cut}).json()["labels"]
    assert kept == [x for x in full if x["score"] >= cut] and 0 < len(kept) < len(full)


def test_batch_keeps_input_order_and_ids(client):
    docs = [
        {"id": "x", "text": "python script"},
        {"text": "game arcade puzzle"},
        {"id": 7, "text": "sql database"},
        {"text": "python script"},
    ]
    r = client.post("/v1/predict/batch", json={"documents": docs, "k": 2})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["id"] for x in results] == ["x", "1", "7", "3"]  # always strings: the given id or the position
    single = [client.post("/v1/predict", json={"text": d["text"], "k": 2}).json()["labels"] for d in docs]
    assert [x["labels"] for x in results] == single
    assert results[0]["labels"] == results[3]["labels"]


def test_reweighting_surfaces_the_tail_label(client, bundles):
    plain = client.post("/v1/predict", json={"text": TAIL_TEXT, "k": 2}).json()["labels"]
    assert plain[0]["name"] == "works-with::image"
    rw = {"scheme": "macro-recall", "alpha": 1.0}
    top = client.post("/v1/predict", json={"text": TAIL_TEXT, "k": 2, "reweight": rw}).json()["labels"]
    assert top[0]["name"] == "role::rare-thing"
    # same answer as the library function the service is built on
    b = load_bundle(bundles["a"])
    vocab = b.predictor.vocab
    a = gains_for(label_weights(vocab.frequency_array, vocab.n_train_docs, "macro-recall"), 1.0)
    ref = predict_reweighted(b.predictor, [TAIL_TEXT], 2, a, b.predictor.model.config.beam_size, len(vocab))
    assert [x["id"] for x in top] == ref.labels[0].tolist()


def test_alpha_zero_is_exactly_the_plain_ranking(client):
    plain = client.post("/v1/predict", json={"text": TAIL_TEXT, "k": 5}).json()["labels"]
    for scheme in ("psp", "power", "macro-recall"):
        r = client.post("/v1/predict", json={"text": TAIL_TEXT, "k": 5, "reweight": {"scheme": scheme, "alpha": 0}})
        assert r.json()["labels"] == plain


def test_power_beta_is_accepted_for_power(client):
    r = client.post(
        "/v1/predict", json={"text": TAIL_TEXT, "k": 3, "reweight": {"scheme": "power", "alpha": 1, "beta": 2}}
    )
    assert r.status_code == 200 and r.json()["labels"][0]["name"] == "role::rare-thing"


def test_labels_are_paged_and_searchable(client):
    page = client.get("/v1/labels", params={"limit": 4, "offset": 2}).json()
    assert page["total"] == 9 and page["offset"] == 2 and [x["id"] for x in page["labels"]] == [2, 3, 4, 5]
    found = client.get("/v1/labels", params={"q": "WORKS-with"}).json()
    assert found["total"] == 3 and all("works-with" in x["name"] for x in found["labels"])
    rare = client.get("/v1/labels", params={"q": "rare"}).json()["labels"]
    assert rare == [{"id": 2, "name": "role::rare-thing", "frequency": 2}]


def test_model_info(client, bundles):
    info = client.get("/v1/model").json()
    assert info["name"] == "tiny-a" and info["label_count"] == 9 and info["kind"] == "xlinear"
    assert info["load_seconds"] > 0 and info["warmup_ms"] > 0
    assert info["manifest"]["files"] == load_bundle(bundles["a"]).manifest["files"]


def test_openapi_documents_the_request_bodies(client):
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/v1/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/PredictRequest"}
    schemas = spec["components"]["schemas"]
    assert schemas["PredictRequest"]["additionalProperties"] is False
    assert set(schemas["Reweight"]["properties"]["scheme"]["enum"]) == {"psp", "power", "macro-recall"}
    assert "BatchRequest" in schemas and "/v1/predict/batch" in spec["paths"]
    assert schemas["BatchResult"]["properties"]["id"]["type"] == "string"  # one id type in every response
    # the hot routes are served by plain Starlette routes, but documented with their security and errors
    op = spec["paths"]["/v1/predict"]["post"]
    assert {"413", "415", "422"} <= set(op["responses"])  # security: only with a key (test_svc_openapi_limits)


def test_health_is_always_open(make_client):
    c = make_client(api_key="s3cret")
    assert c.get("/health").json() == {"status": "ok"}
    assert c.get("/ready").status_code == 200
    assert c.get("/metrics").status_code == 200
    assert c.get("/").status_code == 200


def test_api_key(make_client):
    c = make_client(api_key="s3cret")
    body = {"text": "python script", "k": 1}
    r = c.post("/v1/predict", json=body)
    assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json"
    assert "API key" in r.json()["detail"]
    assert c.post("/v1/predict", json=body, headers={"X-API-Key": "wrong"}).status_code == 401
    assert c.post("/v1/predict", json=body, headers={"X-API-Key": "s3cret"}).status_code == 200
    assert c.post("/v1/predict", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert c.post("/v1/predict/batch", json={"documents": [{"text": "python"}]}).status_code == 401
    assert (
        c.post(
            "/v1/predict/batch", json={"documents": [{"text": "python"}]}, headers={"X-API-Key": "s3cret"}
        ).status_code
        == 200
    )
    assert c.get("/v1/labels").status_code == 401
    assert c.post("/v1/admin/reload", json={}, headers={"X-API-Key": "s3cret"}).status_code == 403  # admin is off


def test_unversioned_predict_aliases_behave_like_v1(make_client):
    c = make_client(api_key="s3cret")
    key = {"X-API-Key": "s3cret"}
    one, batch = {"text": "python script", "k": 3}, {"documents": [{"id": "x", "text": "sql database"}], "k": 2}
    for alias, versioned, body in (("/predict", "/v1/predict", one), ("/predict/batch", "/v1/predict/batch", batch)):
        a, v = c.post(alias, json=body, headers=key), c.post(versioned, json=body, headers=key)
        assert a.status_code == v.status_code == 200
        strip = lambda r: {k: x for k, x in r.json().items() if k != "took_ms"}  # noqa: E731
        assert strip(a) == strip(v)
        assert c.post(alias, json=body).status_code == 401  # auth included
        assert c.post(alias, json={"text": ""}, headers=key).status_code == 422
    assert "/predict" not in c.get("/openapi.json").json()["paths"]  # listed once, under /v1


def _walk(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_openapi_uses_standard_json_schema_keywords(client):
    spec = client.get("/openapi.json").json()
    assert not [n for n in _walk(spec) if {"ge", "le", "gt", "lt"} & set(n) and "type" not in n.get("ge", {})]
    schemas = spec["components"]["schemas"]
    alpha = schemas["Reweight"]["properties"]["alpha"]
    assert alpha["minimum"] == 0 and alpha["maximum"] == 1 and alpha["type"] == "number"
    assert schemas["Optimize"]["properties"]["alpha"]["maximum"] == 1
    beta = [s for s in schemas["Reweight"]["properties"]["beta"]["anyOf"] if s.get("type") == "number"][0]
    assert beta["maximum"] == 10
    for model in ("PredictRequest", "BatchDocument"):
        text = schemas[model]["properties"]["text"]
        assert text["minLength"] == 1 and re.search(text["pattern"], "a b") and not re.search(text["pattern"], " \t")


def test_openapi_documents_every_error_as_problem_json(client):
    spec = client.get("/openapi.json").json()
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for code, response in op["responses"].items():
                if code[0] in "45":
                    assert list(response["content"]) == ["application/problem+json"], (path, method, code)
    expect = {
        ("/v1/predict", "post"): {"400", "401", "413", "415", "422", "503"},
        ("/v1/admin/reload", "post"): {"400", "401", "403", "409", "413", "415", "422", "429"},
        ("/v1/labels", "get"): {"401", "422", "503"},
        ("/v1/model", "get"): {"401", "503"},
        ("/v1/projects/{project_id}/suggest", "post"): {"400", "401", "404", "413", "415", "503"},
        ("/ready", "get"): {"503"},
    }
    for (path, method), codes in expect.items():
        assert codes <= set(spec["paths"][path][method]["responses"]), (path, codes)


def test_an_app_started_a_second_time_still_predicts_in_its_worker_threads(bundles):
    """Each lifespan's shutdown closes the worker pools; a second start (a TestClient reused, schemathesis's ASGI
    calls) gets new ones instead of answering 500 'cannot schedule new futures after shutdown'."""
    from fastapi.testclient import TestClient
    from xtag.config.settings import Settings
    from xtag.service.app import create_app

    app = create_app(Settings(_env_file=None, bundle=bundles["a"], load_in_background=False))
    long_text = "python image network " * 1000  # over XTAG_INLINE_MAX_CHARS: predicted in a worker thread
    for _ in range(2):
        with TestClient(app) as c:
            assert c.post("/v1/predict", json={"text": long_text, "k": 3}).status_code == 200
            assert c.post("/v1/predict", json={"text": "python", "k": 3, "explain": True}).status_code == 200
