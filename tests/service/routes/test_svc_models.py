"""Routes by model name: /v1/models/{name}/predict(/batch) answer as /v1/predict does for the default, GET /v1/models
lists every model, an unknown name is a 404 listing the names, Annif clients pick any model as a project, the admin
plane loads one model under a name only from the bundle root, and reloading one model while another serves under
load fails none of the other's requests."""

from __future__ import annotations

import threading

import annif_client
import httpx
from xtag.config.settings import Settings

from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    ADMIN,
    ADMIN_KEY,
    LiveServer,
    bundles,
    make_client,
    wait_ready,
)

TEXT = {"text": "sql database query table", "k": 3}


def test_a_named_route_answers_as_the_default_route_for_the_default(make_client, bundles):
    c = make_client(models=f"other={bundles['b']}")
    wait_ready(c, path="/v1/models/other/ready")
    default = c.post("/v1/predict", json=TEXT).json()
    named = c.post("/v1/models/tiny-a/predict", json=TEXT).json()
    assert named["labels"] == default["labels"] and named["model"] == default["model"]
    assert c.post("/predict", json=TEXT).json()["labels"] == default["labels"]
    other = c.post("/v1/models/other/predict", json=TEXT).json()
    assert other["model"]["name"] == "tiny-b"
    batch = c.post("/v1/models/other/predict/batch", json={"documents": [{"text": TEXT["text"]}], "k": 3}).json()
    assert batch["model"]["name"] == "tiny-b" and batch["results"][0]["labels"] == other["labels"]
    bad = c.post("/v1/models/other/predict", json={"text": "x", "k": 0})
    assert bad.status_code == 422  # the same validation as /v1/predict


def test_an_unknown_model_is_a_404_that_lists_the_names(make_client, bundles):
    c = make_client(models=f"other={bundles['b']}")
    for path in ("/v1/models/nope/predict", "/v1/models/nope/predict/batch"):
        r = c.post(path, json={"text": "x"} if path.endswith("predict") else {"documents": [{"text": "x"}]})
        assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
        assert r.json()["models"] == ["tiny-a", "other"] and "tiny-a, other" in r.json()["detail"]
    assert c.get("/v1/models/nope/ready").status_code == 404


def test_the_model_list_says_what_each_model_is_and_costs(make_client, bundles):
    c = make_client(models=f"other={bundles['b']}", shadow="other=tiny-a")
    wait_ready(c, path="/v1/models/other/ready")
    listing = c.get("/v1/models").json()
    assert listing["default"] == "tiny-a"
    first, other = listing["models"]
    assert (first["name"], first["default"], first["family"], first["label_count"]) == ("tiny-a", True, "xlinear", 9)
    assert other["state"] == first["state"] == "ready" and other["shadow_of"] == "tiny-a"
    assert other["memory_bytes"] > 0 and other["loaded_at"] > 0 and other["version"] != first["version"]
    assert str(bundles["a"].parent) not in c.get("/v1/models").text


def test_annif_clients_pick_any_model_as_a_project(bundles):
    settings = Settings(_env_file=None, bundle=bundles["a"], models=f"other={bundles['b']}")
    with LiveServer(settings) as server:
        wait_ready(server.url, path="/v1/models/other/ready")
        annif = annif_client.AnnifClient(api_base=server.url + "/v1/")
        assert [p["project_id"] for p in annif.projects] == ["tiny-a", "other"]
        assert annif.get_project("other")["name"] == "tiny-b"
        mine = annif.suggest("other", "sql database query table", limit=3)
        direct = httpx.post(server.url + "/v1/models/other/predict", json=TEXT).json()["labels"]
        assert [r["label"] for r in mine] == [d["name"] for d in direct]


def test_loading_a_model_by_name_is_fenced_as_reloads_are(make_client, bundles, tmp_path):
    c = make_client(admin_key=ADMIN_KEY)
    body = {"bundle": str(bundles["b"])}
    assert c.put("/v1/admin/models/other", json=body).status_code == 401
    assert c.put("/v1/admin/models/other", json={"bundle": str(tmp_path)}, headers=ADMIN).status_code == 403
    bad = c.put("/v1/admin/models/a.b..c", json=body, headers=ADMIN)
    assert bad.status_code == 422 and "path characters" in bad.json()["detail"]
    assert c.put("/v1/admin/models/other", json=body, headers=ADMIN).json()["model"]["name"] == "tiny-b"
    assert c.post("/v1/models/other/predict", json=TEXT).status_code == 200
    no_admin = make_client()
    r = no_admin.put("/v1/admin/models/other", json=body)
    assert r.status_code == 403 and "XTAG_ADMIN_KEY" in r.json()["detail"]


def test_the_named_routes_are_documented_once_each(make_client):
    paths = make_client().get("/openapi.json").json()["paths"]
    assert {"/v1/models", "/v1/models/{name}/predict", "/v1/models/{name}/predict/batch"} <= set(paths)
    params = paths["/v1/models/{name}/predict"]["post"]["parameters"]
    assert [p["name"] for p in params] == ["name", "X-Routing-Key"]
    assert "404" in paths["/v1/models/{name}/predict"]["post"]["responses"]
    pinned = paths["/v1/models/{name}/versions/{version}/predict"]["post"]
    assert [p["name"] for p in pinned["parameters"]] == ["name", "version"] and "404" in pinned["responses"]
    assert "X-Model-Version" in pinned["responses"]["200"]["headers"]
    assert "/v1/models/{name}/versions/{version}/predict/batch" in paths


def test_reloading_another_model_under_load_fails_no_request_of_the_default(bundles):
    settings = Settings(
        _env_file=None, bundle=bundles["a"], models=f"other={bundles['b']}", admin_key=ADMIN_KEY, reload_interval_s=0
    )
    with LiveServer(settings) as server:
        wait_ready(server.url, path="/v1/models/other/ready")
        stop, statuses = threading.Event(), []

        def client() -> None:
            with httpx.Client(base_url=server.url, timeout=30) as http:
                while not stop.is_set():
                    statuses.append(http.post("/v1/predict", json=TEXT).status_code)

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        admin = httpx.Client(base_url=server.url, headers=ADMIN, timeout=60)
        outcomes = [admin.post("/v1/admin/models/other/reload", json={}).status_code for _ in range(3)]
        outcomes.append(admin.delete("/v1/admin/models/other").status_code)
        outcomes.append(admin.put("/v1/admin/models/other", json={"bundle": str(bundles["b"])}).status_code)
        outcomes.append(admin.put("/v1/admin/models/other", json={"bundle": str(bundles["broken"])}).status_code)
        stop.set()
        for t in threads:
            t.join(30)
        assert outcomes == [200, 200, 200, 204, 200, 422]
        assert len(statuses) > 20 and set(statuses) == {200}
        assert httpx.post(server.url + "/v1/models/other/predict", json=TEXT).json()["model"]["name"] == "tiny-b"


def test_annif_learn_takes_any_served_project_and_refuses_others(make_client, bundles, tmp_path):
    c = make_client(models=f"other={bundles['b']}", admin_key=ADMIN_KEY, feedback_db=str(tmp_path / "fb.sqlite3"))
    wait_ready(c, path="/v1/models/other/ready")
    body = [{"text": "astronomy telescope", "subjects": [{"label": "science::astro"}]}]
    assert c.post("/v1/projects/other/learn", json=body, headers=ADMIN).status_code == 204
    assert c.post("/v1/projects/nope/learn", json=body, headers=ADMIN).status_code == 404
    r = c.post("/v1/projects/nope/suggest", data={"text": "sql"})
    assert r.status_code == 404 and r.json()["detail"] == "Project 'nope' not found"
