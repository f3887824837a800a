"""The served OpenAPI document states the limits the server enforces and only the credentials it asks for
(service/http/openapi_limits.py); reweighted labels carry their gain; explanations never show -0.0."""

from __future__ import annotations

import re

import numpy as np
from xtag.models.explain.linear import rounded

from tests.service.svc_support import ADMIN, ADMIN_KEY, bundles, client, make_client  # noqa: F401  (pytest fixtures)


def _integer(prop: dict) -> dict:
    return next(s for s in prop["anyOf"] if s.get("type") == "integer")


def test_schema_states_the_enforced_maxima(make_client):
    c = make_client(max_k=500, max_beam_size=77, max_batch_documents=40, max_text_chars=5000)
    spec = c.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    for name in ("PredictRequest", "BatchRequest"):
        assert schemas[name]["properties"]["k"]["maximum"] == 9  # the tiny bundle's label count, under XTAG_MAX_K
        assert _integer(schemas[name]["properties"]["beam_size"])["maximum"] == 77
    assert schemas["BatchRequest"]["properties"]["documents"]["maxItems"] == 40
    assert schemas["PredictRequest"]["properties"]["text"]["maxLength"] == 5000
    assert "at most 40 documents" in schemas["Optimize"]["description"] and "1024 docs" not in str(spec)
    params = spec["paths"]["/v1/projects/{project_id}/suggest-batch"]["post"]["parameters"]
    assert next(p for p in params if p["name"] == "limit")["schema"]["maximum"] == 9
    # what the schema states is what the server enforces: its maximum passes, one more is refused
    assert c.post("/v1/predict", json={"text": "python", "k": 9, "beam_size": 77}).status_code == 200
    assert c.post("/v1/predict", json={"text": "python", "k": 10}).status_code == 422
    assert c.post("/v1/predict", json={"text": "python", "beam_size": 78}).status_code == 422


def _security(spec: dict) -> tuple[dict, dict, dict]:
    paths = spec["paths"]
    return (
        spec.get("components", {}).get("securitySchemes", {}),
        paths["/v1/predict"]["post"].get("security"),
        paths["/v1/admin/reload"]["post"].get("security"),
    )


def test_security_schemes_are_declared_only_when_configured(make_client):
    schemes, predict, reload = _security(make_client().get("/openapi.json").json())
    assert schemes == {} and predict is None and reload is None
    key = {"X-API-Key": "k"}
    schemes, predict, reload = _security(make_client(api_key="k").get("/openapi.json", headers=key).json())
    assert set(schemes) == {"APIKeyHeader"} and predict == [{"APIKeyHeader": []}] and reload is None  # admin: off
    spec = make_client(api_key="k", admin_key="a").get("/openapi.json", headers=key).json()
    schemes, predict, reload = _security(spec)
    assert set(schemes) == {"APIKeyHeader", "AdminKeyHeader"}
    assert predict == [{"APIKeyHeader": []}] and reload == [{"AdminKeyHeader": []}]


def test_reweighted_labels_carry_the_gain_they_are_ordered_by(client):
    body = {"text": "quasar telescope image photo python", "k": 5, "reweight": {"scheme": "psp", "alpha": 1.0}}
    model = client.app.state.registry.current
    a = model.gains("psp", 1.0, None)
    for explain in (False, True):
        labels = client.post("/v1/predict", json={**body, "explain": explain}).json()["labels"]
        gains = [label["gain"] for label in labels]
        assert gains == sorted(gains, reverse=True) and len(gains) == 5
        assert np.allclose(gains, [a[label["id"]] * label["score"] for label in labels], rtol=1e-6)
    plain = client.post("/v1/predict", json={"text": "python", "k": 3}).json()["labels"]
    assert all("gain" not in label for label in plain)


def test_explanations_never_show_negative_zero(client):
    assert str(rounded(-1e-9)) == "0.0" and rounded(-0.5) == -0.5
    r = client.post(
        "/v1/predict/batch", json={"documents": [{"text": "python sql image"}] * 4, "k": 9, "explain": True}
    )
    assert r.status_code == 200 and "-0.0," not in r.text and "-0.0}" not in r.text


def test_the_schema_states_what_the_server_refuses_and_accepts_of_alternatives_and_empty_bodies(make_client):
    """schemathesis's ST202 (a schema-valid request refused): both `reweight` and `optimize` are refused, and the
    schema says so; the reload's body is declared, and `{}` re-reads the configured bundle."""
    client = make_client(admin_key=ADMIN_KEY)
    client.headers.update(ADMIN)
    spec = client.get("/openapi.json").json()
    batch = spec["components"]["schemas"]["BatchRequest"]
    assert set(batch["not"]["required"]) == {"optimize", "reweight"}
    both = {
        "documents": [{"text": "python"}],
        "optimize": {"metric": "macro-f1"},
        "reweight": {"scheme": "psp", "alpha": 0.5},
    }
    assert client.post("/v1/predict/batch", json=both).status_code == 422
    one = {k: v for k, v in both.items() if k != "reweight"}
    assert client.post("/v1/predict/batch", json=one).status_code == 200
    assert spec["paths"]["/v1/admin/reload"]["post"]["requestBody"]["required"] is True
    assert client.post("/v1/admin/reload", json={}).status_code == 200
    assert client.post("/v1/admin/reload").status_code == 415  # no JSON Content-Type: what a foreign page can send


def test_the_blank_text_pattern_is_the_servers_own_rule(client):
    """A text of only U+001D passed the schema's old pattern (\\S) and was refused: schema and server now agree on
    every character str.strip() removes, and on one that it keeps."""
    pattern = re.compile(
        client.get("/openapi.json").json()["components"]["schemas"]["PredictRequest"]["properties"]["text"]["pattern"]
    )
    for text in ("\u001d", "\u0085 \u3000", "\t\n"):
        assert pattern.search(text) is None
        assert client.post("/v1/predict", json={"text": text}).status_code == 422
    assert pattern.search("\ufeff") and client.post("/v1/predict", json={"text": "\ufeff"}).status_code == 200
