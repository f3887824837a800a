"""Model versions (issue 50): ROOT/NAME/VERSION/ found by --all and models.toml's versions, listed on /v1/models,
pinned by /v1/models/{name}/versions/{v}/predict(/batch), named by every answer (X-Model-Version, served_version);
traffic split by weight, sticky by key, changed, promoted and rolled back by the admin plane, bad changes refused
with the traffic left as it was, a version that failed never routed to, and the requests counted per version."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    ADMIN,
    ADMIN_KEY,
    STARTUP_S,
    bundles,
    make_client,
)

TEXT = {"text": "sql database query table", "k": 3}


@pytest.fixture
def root(tmp_path, bundles) -> Path:
    """ROOT/tags/0 = a bundle that fails to load, ROOT/tags/1 = tiny-a, ROOT/tags/2 = tiny-b; ROOT/solo = tiny-a."""
    for version, key in (("0", "broken"), ("1", "a"), ("2", "b")):
        shutil.copytree(bundles[key], tmp_path / "tags" / version)
    shutil.copytree(bundles["a"], tmp_path / "solo")
    return tmp_path


def settled(c):
    """The client once every version of every model has loaded or failed (the versions beside the stable one load
    after every model's stable version, in the background)."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        models = c.get("/v1/models").json()["models"]
        if all(v["state"] != "loading" for m in models for v in m["versions"]) and c.get("/ready").status_code == 200:
            return c
        time.sleep(0.05)
    raise AssertionError("versions still loading")


def serve(make_client, root: Path, **more):
    return settled(make_client(bundle=None, bundle_root=root, all_bundles=True, admin_key=ADMIN_KEY, **more))


def traffic(c, weights: dict, name: str = "tags"):
    return c.put(f"/v1/admin/models/{name}/traffic", json={"weights": weights}, headers=ADMIN)


def test_the_triton_layout_serves_each_folder_as_one_model_with_its_versions(make_client, root, bundles):
    c = serve(make_client, root, wait=False)
    listing = {m["name"]: m for m in c.get("/v1/models").json()["models"]}
    assert set(listing) == {"solo", "tags"}
    tags = listing["tags"]
    # the latest version is the stable one (Triton's default policy) and has all the traffic
    assert [(v["version"], v["state"], v["weight"]) for v in tags["versions"]] == [
        ("0", "failed", 0),
        ("1", "ready", 0),
        ("2", "ready", 100),
    ]
    assert tags["traffic"]["stable"] == "2" and tags["version"] == tags["versions"][2]["bundle_version"]
    assert "cannot" in tags["versions"][0]["error"] or tags["versions"][0]["error"]
    assert listing["solo"]["versions"][0]["version"] == "1" and listing["solo"]["traffic"]["weights"] == {"1": 100}
    assert c.post("/v1/models/tags/predict", json=TEXT).json()["model"]["name"] == "tiny-b"
    assert c.get("/v1/models/nope").status_code == 404


def test_versions_traffic_and_stable_from_models_toml(make_client, root):
    (root / "models.toml").write_text(
        '[models.tags]\nversions = {"0" = "tags/0", "1" = "tags/1", "2" = "tags/2"}\ntraffic = {"1" = 90, "2" = 10}\n'
    )
    c = settled(make_client(bundle=None, bundle_root=root, admin_key=ADMIN_KEY, wait=False))
    entry = c.get("/v1/models/tags").json()
    assert entry["traffic"]["stable"] == "1" and entry["traffic"]["weights"] == {"0": 0, "1": 90, "2": 10}
    states = {v["version"]: v["state"] for v in entry["versions"]}
    assert states == {"0": "failed", "1": "ready", "2": "ready"}
    got = Counter(c.post("/v1/predict", json=TEXT).headers["x-model-version"] for _ in range(200))
    assert set(got) == {"1", "2"} and 120 < got["1"] < 200  # 90/10 of 200 requests, loosely


@pytest.fixture
def versioned(make_client, root):
    (root / "models.toml").write_text('[models.tags]\nversions = {"0" = "tags/0", "1" = "tags/1", "2" = "tags/2"}\n')
    (root / "models.toml").write_text(
        (root / "models.toml").read_text() + 'stable = "1"\n[models.solo]\npath = "solo"\n'
    )
    return settled(make_client(bundle=None, bundle_root=root, admin_key=ADMIN_KEY, wait=False))


def test_each_answer_names_its_version_and_a_pinned_route_answers_from_that_version(versioned):
    c = versioned
    r = c.post("/v1/predict", json=TEXT)
    assert r.headers["x-model-version"] == "1" and r.json()["model"]["served_version"] == "1"
    assert r.json()["model"]["name"] == "tiny-a"
    pinned = c.post("/v1/models/tags/versions/2/predict", json=TEXT)
    assert pinned.headers["x-model-version"] == "2" and pinned.json()["model"]["name"] == "tiny-b"
    batch = c.post("/v1/models/tags/versions/2/predict/batch", json={"documents": [{"text": TEXT["text"]}], "k": 3})
    assert batch.json()["model"]["served_version"] == "2"
    assert batch.json()["results"][0]["labels"] == pinned.json()["labels"]
    solo = c.post("/v1/models/solo/predict", json=TEXT)
    assert solo.headers["x-model-version"] == "1" and solo.json()["model"]["served_version"] == "1"
    unknown = c.post("/v1/models/tags/versions/9/predict", json=TEXT)
    assert unknown.status_code == 404 and unknown.json()["versions"] == ["0", "1", "2"]
    failed = c.post("/v1/models/tags/versions/0/predict", json=TEXT)
    assert failed.status_code == 503 and "version 0" in failed.json()["detail"]


def test_weights_take_effect_at_once_and_keys_stick_to_one_version(versioned):
    c = versioned
    r = traffic(c, {"1": 50, "2": 50})
    assert r.status_code == 200, r.text
    assert r.json()["weights"] == {"0": 0, "1": 50, "2": 50} and r.json()["action"] == "weights"
    for key in ("user-1", "user-2", "user-3", "session-x"):
        seen = {
            c.post("/v1/predict", json=TEXT, headers={"X-Routing-Key": key}).headers["x-model-version"]
            for _ in range(8)
        }
        assert len(seen) == 1
    docs = {"documents": [{"id": "doc-42", "text": TEXT["text"]}]}
    assert len({c.post("/v1/predict/batch", json=docs).headers["x-model-version"] for _ in range(8)}) == 1
    unkeyed = Counter(c.post("/v1/predict", json=TEXT).headers["x-model-version"] for _ in range(100))
    assert set(unkeyed) == {"1", "2"}


@pytest.mark.parametrize(
    ("weights", "status", "code"),
    [
        ({"1": 60, "2": 30}, 422, "invalid-weights"),
        ({"1": 50, "9": 50}, 422, "unknown-version"),
        ({"1": 50, "0": 50}, 409, "version-not-ready"),
        ({"1": 101, "2": -1}, 422, "validation-error"),
        ({"1": 50.0, "2": 50}, 422, "validation-error"),
    ],
)
def test_a_bad_split_is_refused_with_the_reason_and_the_traffic_stays(versioned, weights, status, code):
    c = versioned
    before = c.get("/v1/models/tags").json()["traffic"]
    r = traffic(c, weights)
    assert r.status_code == status and r.json()["type"].endswith(code), r.text
    assert c.get("/v1/models/tags").json()["traffic"] == before
    assert c.post("/v1/predict", json=TEXT).headers["x-model-version"] == "1"


def test_promote_makes_a_version_stable_and_rollback_returns_at_once(versioned):
    c = versioned
    assert traffic(c, {"1": 95, "2": 5}).status_code == 200
    r = c.post("/v1/admin/models/tags/rollback", headers=ADMIN, json={})
    assert r.status_code == 200 and r.json()["weights"]["1"] == 100 and r.json()["stable"] == "1"
    r = c.post("/v1/admin/models/tags/promote", json={"version": "2", "reason": "canary held"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert (r.json()["stable"], r.json()["previous_stable"], r.json()["weights"]["2"]) == ("2", "1", 100)
    assert {c.post("/v1/predict", json=TEXT).headers["x-model-version"] for _ in range(10)} == {"2"}
    assert c.get("/ready").status_code == 200
    r = c.post("/v1/admin/models/tags/rollback", headers={**ADMIN, "Content-Type": "application/json"})  # no body

    assert r.status_code == 200 and (r.json()["stable"], r.json()["weights"]["1"]) == ("1", 100)
    assert c.post("/v1/predict", json=TEXT).headers["x-model-version"] == "1"
    assert c.post("/v1/admin/models/tags/promote", json={"version": "0"}, headers=ADMIN).status_code == 409
    assert c.post("/v1/admin/models/tags/promote", json={"version": "7"}, headers=ADMIN).status_code == 422
    assert (
        c.post("/v1/admin/models/solo/rollback", headers=ADMIN, json={}).json()["type"].endswith("no-previous-version")
    )
    assert c.post("/v1/admin/models/nope/rollback", headers=ADMIN, json={}).status_code == 404
    assert c.put("/v1/admin/models/tags/traffic", json={"weights": {"1": 100}}).status_code == 401
    metrics = c.get("/metrics").text
    assert 'xtag_traffic_changes_total{action="promote",model="tags"} 1.0' in metrics
    assert 'xtag_traffic_changes_total{action="rollback",model="tags"} 2.0' in metrics
    assert 'xtag_traffic_weight_percent{model="tags",version="1"} 100.0' in metrics


def test_requests_are_counted_per_version_and_seen_by_the_hooks(versioned):
    c = versioned
    seen = []
    c.app.state.registry.hooks.answered.append(lambda *a: seen.append(a))
    c.post("/v1/predict", json=TEXT)
    c.post("/v1/models/tags/versions/2/predict", json=TEXT)
    metrics = c.get("/metrics").text
    line = 'xtag_http_requests_total{endpoint="%s",method="POST",model="tags",status="200",version="%s"} 1.0'
    assert line % ("/v1/predict", "1") in metrics
    assert line % ("/v1/models/{name}/versions/{version}/predict", "2") in metrics
    assert [(m, v, s) for m, v, s, _ in seen] == [("tags", "1", 200), ("tags", "2", 200)]


def test_a_rollout_policy_holding_the_traffic_refuses_other_changes_but_not_a_rollback(versioned):
    c = versioned
    c.app.state.registry.traffic["tags"].hold("policy")
    r = traffic(c, {"1": 50, "2": 50})
    assert r.status_code == 409 and r.json()["type"].endswith("rollout-in-progress")
    assert c.post("/v1/admin/models/tags/rollback", headers=ADMIN, json={}).status_code == 409  # nowhere to go
    c.app.state.registry.traffic["tags"].set_weights({"1": 50, "2": 50}, by="policy")
    assert c.post("/v1/admin/models/tags/rollback", headers=ADMIN, json={}).json()["held_by"] is None


def test_unloading_a_model_unloads_every_version(versioned):
    c = versioned
    assert c.delete("/v1/admin/models/tags?new_default=solo", headers=ADMIN).status_code == 204
    assert all(slot.unloaded for slot in c.app.state.registry.traffic["tags"].versions.values())
    assert c.post("/v1/models/tags/versions/2/predict", json=TEXT).status_code == 404
    assert c.get("/v1/models/tags").status_code == 404
    assert c.post("/v1/predict", json=TEXT).headers["x-model-version"] == "1"  # solo, the default now
