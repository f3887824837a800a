"""Nested JSON at any depth gets a 4xx problem+json on every route that reads a JSON body, never a 500 (issue 47,
defect 4: orjson reads 1,000 levels, a wide integer sent the body to the json module again, whose RecursionError
escaped)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xtag.service.routes.annif import project_id

from tests.service.svc_support import ADMIN, ADMIN_KEY, bundles, make_client  # noqa: F401  (pytest fixtures)

API_KEY = "nested-api-key"
HEADERS = {**ADMIN, "X-API-Key": API_KEY, "Content-Type": "application/json"}
# Each route's body with NEST where the nested value goes: a field, a list item, or the body itself.
TEMPLATES = [
    ("POST", "/v1/predict", '{"text": "python", "k": NEST}'),
    ("POST", "/v1/predict", '{"text": NEST}'),
    ("POST", "/v1/predict", "NEST"),
    ("POST", "/v1/predict/batch", '{"documents": [{"id": NEST, "text": "python"}]}'),
    ("POST", "/v1/predict/batch", '{"documents": NEST}'),
    ("POST", "/v1/projects/PROJECT/suggest-batch", '{"documents": [{"document_id": NEST, "text": "python"}]}'),
    ("POST", "/v1/feedback", '{"documents": [{"id": 1, "text": "python", "labels": NEST}]}'),
    ("POST", "/v1/projects/PROJECT/learn", '[{"text": "python", "subjects": NEST}]'),
    ("POST", "/v1/admin/reload", '{"bundle": NEST}'),
    ("PUT", "/v1/admin/models/other", '{"bundle": NEST}'),
]
WIDE = "1234567890123456789012"  # 22 digits: wider than orjson's integers, so the body is read again exactly


def nested(depth: int, leaf: str, opener: str = "[") -> str:
    close = "]" if opener == "[" else "}"
    return opener * depth + leaf + close * depth


@pytest.fixture(scope="module")
def api(bundles, tmp_path_factory):
    from fastapi.testclient import TestClient
    from xtag.config.settings import Settings
    from xtag.service.app import create_app

    from tests.service.svc_support import wait_ready

    db = str(tmp_path_factory.mktemp("nested") / "fb.sqlite3")
    settings_ = Settings(_env_file=None, bundle=bundles["a"], api_key=API_KEY, admin_key=ADMIN_KEY, feedback_db=db)
    with TestClient(create_app(settings_)) as client:
        wait_ready(client)
        yield client, project_id(client.app.state.registry.current)


def assert_problem_4xx(r) -> None:
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["detail"]


def test_the_reported_body_is_a_4xx_problem(bundles, make_client):
    c = make_client()  # no key at all, as reported
    body = '{"text":"a","k":' + "[" * 1000 + WIDE + "]" * 1000 + "}"
    r = c.post("/v1/predict", content=body, headers={"Content-Type": "application/json"})
    assert_problem_4xx(r)
    assert r.status_code == 422 and r.json()["detail"].startswith("body.k: ")


@given(
    template=st.sampled_from(TEMPLATES),
    depth=st.one_of(st.integers(0, 50), st.integers(900, 1100), st.integers(1100, 5000)),
    leaf=st.sampled_from(
        [WIDE, "-" + WIDE, "9" * 400, "1", '"x"', '"\\ud800"', "1e400", "NaN", "{}", "[]", "null", ""]
    ),
    opener=st.sampled_from(["[", '{"a":']),
)
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_any_nesting_on_any_json_route_is_a_4xx_problem(api, template, depth, leaf, opener):
    client, project = api
    method, path, body = template
    value = nested(depth, leaf, opener)
    if depth == 0 and leaf in ('"x"', "1"):  # a valid value where one is expected: other answers are fine
        return
    r = client.request(method, path.replace("PROJECT", project), content=body.replace("NEST", value), headers=HEADERS)
    assert_problem_4xx(r)


@pytest.mark.parametrize(
    "value, words",
    [('"a\\ud800b"', "lone surrogate"), ("NaN", "NaN is not JSON"), ('"a",', "Expecting property name")],
)
def test_what_orjson_refuses_stays_refused_beside_an_integer_it_cannot_read(api, value, words):
    # an integer of 400 digits sends the body to the json module, which takes NaN and lone surrogates: they must
    # still get 400 (a lone surrogate reached the feedback store and came back as a 503)
    client, _ = api
    body = f'{{"documents": [{{"id": {"9" * 400}, "text": {value}, "labels": ["x"]}}]}}'
    r = client.post("/v1/feedback", content=body, headers=HEADERS)
    assert_problem_4xx(r)
    assert r.status_code == 400 and words in r.json()["detail"], r.text
