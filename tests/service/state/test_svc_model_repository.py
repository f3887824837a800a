"""Many models in one process (service/state/model_repository.py): each loads, reloads and unloads on its own; a failure of
one leaves the others serving and shows in /ready by name; the default cannot be dropped without a successor; a
load that would pass XTAG_MAX_MEMORY_MB is refused before it starts; log lines name the model."""

from __future__ import annotations

import logging
import time

from xtag.service.routes.admin import reload_all
from xtag.service.state.memory import bundle_bytes, resident_mb

from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    ADMIN,
    ADMIN_KEY,
    STARTUP_S,
    bundles,
    make_client,
)

TEXT = {"text": "python interpreter script module"}


def two_models(make_client, bundles, second: str = "b", **settings):
    return make_client(models=f"second={bundles[second]}", **settings)


def wait_settled(client, name: str) -> dict:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        entry = next(m for m in client.get("/v1/models").json()["models"] if m["name"] == name)
        if entry["state"] != "loading":
            return entry
        time.sleep(0.02)
    raise AssertionError(f"{name} still loading")


def test_a_failed_model_leaves_the_others_serving_and_is_named_in_ready(make_client, bundles):
    c = two_models(make_client, bundles, second="broken")
    entry = wait_settled(c, "second")
    assert entry["state"] == "failed" and "broken" in entry["error"] and entry["version"] is None
    ready = c.get("/ready")
    assert ready.status_code == 200  # the default serves
    assert ready.json()["models"] == {"tiny-a": "ready", "second": "failed"}
    assert "broken" in ready.json()["errors"]["second"]
    assert c.post("/v1/predict", json=TEXT).json()["model"]["name"] == "tiny-a"
    r = c.post("/v1/models/second/predict", json=TEXT)
    assert r.status_code == 503 and "model second" in r.json()["detail"] and "broken" in r.json()["detail"]
    assert c.get("/v1/models/second/ready").status_code == 503
    assert c.get("/v1/models/tiny-a/ready").status_code == 200


def test_ready_is_503_naming_the_default_when_it_failed(make_client, bundles):
    c = make_client(wait=False, bundle=bundles["broken"], models=f"good={bundles['a']}")
    deadline = time.monotonic() + STARTUP_S
    while c.get("/ready").json().get("errors", {}).get("broken") is None and time.monotonic() < deadline:
        time.sleep(0.02)
    r = c.get("/ready")
    assert r.status_code == 503 and r.json()["detail"].startswith("not ready: model broken: ")


def test_the_default_is_unloaded_only_when_another_takes_its_place(make_client, bundles, caplog):
    c = two_models(make_client, bundles, admin_key=ADMIN_KEY)
    wait_settled(c, "second")
    r = c.delete("/v1/admin/models/tiny-a", headers=ADMIN)
    assert r.status_code == 409 and "second" in r.json()["detail"]
    assert c.delete("/v1/admin/models/tiny-a?new_default=nope", headers=ADMIN).status_code == 404
    with caplog.at_level(logging.INFO, logger="xtag.service"):
        assert c.delete("/v1/admin/models/tiny-a?new_default=second", headers=ADMIN).status_code == 204
    unloaded = [x for x in caplog.records if getattr(x, "event", None) == "bundle_unloaded"]
    assert [(x.getMessage(), x.model) for x in unloaded] == [("model tiny-a: unloaded", "tiny-a")]
    assert c.post("/v1/predict", json=TEXT).json()["model"]["name"] == "tiny-b"  # the new default
    gone = c.post("/v1/models/tiny-a/predict", json=TEXT)
    assert gone.status_code == 404 and gone.json()["models"] == ["second"]
    listed = {m["name"]: m["state"] for m in c.get("/v1/models").json()["models"]}
    assert listed == {"tiny-a": "unloaded", "second": "ready"}
    assert [p["project_id"] for p in c.get("/v1/projects").json()["projects"]] == ["second"]
    back = c.put("/v1/admin/models/tiny-a", json={"bundle": str(bundles["a"])}, headers=ADMIN)
    assert back.status_code == 200 and c.get("/v1/models/tiny-a/ready").status_code == 200


def test_reloading_one_model_leaves_the_others_object_untouched(make_client, bundles, caplog):
    c = two_models(make_client, bundles, admin_key=ADMIN_KEY)
    c.headers.update(ADMIN)
    wait_settled(c, "second")
    registry = c.app.state.registry
    default, before = registry.current, registry.slots["second"].current
    with caplog.at_level(logging.INFO, logger="xtag.service"):
        r = c.post("/v1/admin/models/second/reload", json={})
    assert r.status_code == 200 and r.json()["model"]["name"] == "tiny-b"
    assert registry.current is default and registry.slots["second"].current is not before
    reloaded = [x for x in caplog.records if getattr(x, "event", None) == "bundle_reloaded"]
    assert [x.model for x in reloaded] == ["second"] and reloaded[0].getMessage().startswith("model second: reloaded")
    assert c.post("/v1/admin/models/nope/reload", json={}).status_code == 404


def test_sighup_reloads_every_model_from_its_configured_path(make_client, bundles):
    c = two_models(make_client, bundles)
    wait_settled(c, "second")
    registry = c.app.state.registry
    before = {name: slot.current for name, slot in registry.slots.items()}
    assert c.portal.call(reload_all, c.app) == {}
    assert all(registry.slots[name].current is not old for name, old in before.items())


def test_a_load_over_the_memory_limit_is_refused_and_nothing_is_evicted(make_client, bundles):
    c = make_client(admin_key=ADMIN_KEY)
    need_mb = bundle_bytes(bundles["b"]) / 2**20
    c.app.state.registry.max_memory_mb = resident_mb() + need_mb / 2  # room for half of it
    r = c.put("/v1/admin/models/second", json={"bundle": str(bundles["b"])}, headers=ADMIN)
    assert r.status_code == 422 and "XTAG_MAX_MEMORY_MB" in r.json()["detail"], r.text
    assert c.post("/v1/predict", json=TEXT).json()["model"]["name"] == "tiny-a"
    assert [m["name"] for m in c.get("/v1/models").json()["models"]] == ["tiny-a"]  # a refused new name is not kept
    c.app.state.registry.max_memory_mb = resident_mb() + 4 * need_mb + 64
    r = c.put("/v1/admin/models/third", json={"bundle": str(bundles["b"])}, headers=ADMIN)
    assert r.status_code == 200
