"""The admin plane: its own key, reload targets fenced to the bundle root, no filesystem probing, JSON only,
one reload at a time, no server paths in answers, and a warm-up that refuses a corrupt (NaN) bundle."""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time

import numpy as np
import pytest
from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.types import Predictions
from xtag.service.routes.admin import reload_all
from xtag.service.state import model_slot as registry
from xtag.service.state.model_slot import ServedModel

from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    ADMIN,
    ADMIN_KEY,
    STARTUP_S,
    bundles,
    client,
    make_client,
    poisoned_bundle,
    wait_ready,
)

RELOAD = "/v1/admin/reload"


def version(path) -> str:
    return load_bundle(path).version


STATE_CHANGING = [  # every admin route that changes what is served
    ("POST", RELOAD, {}),
    ("POST", RELOAD, {"bundle": "tiny-b"}),
    ("POST", "/v1/admin/models/tiny-a/reload", {}),
    ("PUT", "/v1/admin/models/other", {"bundle": "tiny-b"}),
    ("DELETE", "/v1/admin/models/tiny-a?new_default=other", None),
    ("DELETE", "/v1/admin/models/other", None),
]


@pytest.mark.parametrize("api_key", [None, "api-s3cret"])
def test_without_an_admin_key_the_admin_plane_is_off(make_client, bundles, api_key):
    """Issue 47: with no XTAG_ADMIN_KEY anyone (or any API-key holder) could unload the default model and reload in
    a loop. Now every state-changing admin route is refused, saying how to enable it, and nothing changes."""
    c = make_client(api_key=api_key, models=f"other={bundles['b']}")
    wait_ready(c, path="/v1/models/other/ready")
    headers = {"X-API-Key": api_key, "X-Admin-Key": api_key} if api_key else {}
    before = {name: slot.current for name, slot in c.app.state.registry.slots.items()}
    for method, path, body in STATE_CHANGING:
        r = c.request(method, path, json=body, headers=headers)
        assert r.status_code == 403 and r.headers["content-type"] == "application/problem+json", (method, path)
        assert r.json()["type"].endswith("admin-key-required") and "set XTAG_ADMIN_KEY" in r.json()["detail"]
    assert {name: slot.current for name, slot in c.app.state.registry.slots.items()} == before
    assert [m["state"] for m in c.get("/v1/models", headers=headers).json()["models"]] == ["ready", "ready"]


def test_reloads_are_rate_limited_per_model(make_client, bundles):
    """A model's load at start counts too: with several workers each HTTP reload rolls them all (SIGHUP), and the
    fresh workers must not take the next reload at once."""
    c = make_client(admin_key=ADMIN_KEY, reload_interval_s=60)
    c.headers.update(ADMIN)
    for method, path, body in [
        ("POST", RELOAD, {}),
        ("POST", "/v1/admin/models/tiny-a/reload", {}),
        ("PUT", "/v1/admin/models/tiny-a", {"bundle": str(bundles["b"])}),
    ]:
        r = c.request(method, path, json=body)
        assert r.status_code == 429 and r.json()["type"].endswith("reload-rate-limited"), (method, path)
        assert 50 <= int(r.headers["retry-after"]) <= 60 and "XTAG_RELOAD_INTERVAL_S" in r.json()["detail"]
    put = {"bundle": str(bundles["b"])}
    assert c.put("/v1/admin/models/other", json=put).status_code == 200  # another model: its own budget
    assert c.put("/v1/admin/models/other", json=put).status_code == 429
    assert c.post("/v1/predict", json={"text": "python"}).json()["model"]["name"] == "tiny-a"


def test_an_unloaded_configured_model_comes_back_by_sighup(make_client, bundles):
    c = make_client(admin_key=ADMIN_KEY, models=f"other={bundles['b']}")
    wait_ready(c, path="/v1/models/other/ready")
    assert c.delete("/v1/admin/models/tiny-a?new_default=other", headers=ADMIN).status_code == 204
    assert c.post("/v1/models/tiny-a/predict", json={"text": "python"}).status_code == 404
    assert c.portal.call(reload_all, c.app) == {}  # what SIGHUP runs (app._sighup)
    assert {m["name"]: m["state"] for m in c.get("/v1/models").json()["models"]} == {
        "tiny-a": "ready",
        "other": "ready",
    }
    assert c.post("/v1/models/tiny-a/predict", json={"text": "python"}).json()["model"]["name"] == "tiny-a"


def test_a_failed_put_under_a_new_name_is_not_kept(make_client, bundles):
    """Issue 47: it stayed `failed` in /v1/models and /ready for ever. The 422 says why; nothing is left behind."""
    c = make_client(admin_key=ADMIN_KEY)
    r = c.put("/v1/admin/models/newbie", json={"bundle": str(bundles["broken"])}, headers=ADMIN)
    assert r.status_code == 422 and "model newbie" in r.json()["detail"]
    assert [m["name"] for m in c.get("/v1/models").json()["models"]] == ["tiny-a"]
    assert c.get("/ready").status_code == 200 and "newbie" not in c.get("/ready").text
    assert c.get("/v1/models/newbie/ready").status_code == 404
    assert c.put("/v1/admin/models/newbie", json={"bundle": str(bundles["b"])}, headers=ADMIN).status_code == 200


def test_options_on_a_model_route_lists_every_method(client):
    r = client.options("/v1/admin/models/tiny-a")
    assert r.status_code == 405 and r.headers["allow"] == "DELETE, PUT"


def test_the_name_parameter_states_the_model_name_pattern(make_client):
    paths = make_client(admin_key=ADMIN_KEY).get("/openapi.json").json()["paths"]
    for path in ("/v1/admin/models/{name}", "/v1/models/{name}/predict", "/v1/projects/{project_id}/suggest"):
        for operation in paths[path].values():
            (parameter,) = [p for p in operation["parameters"] if p["in"] == "path"]
            pattern = re.compile(parameter["schema"]["pattern"])
            assert pattern.search("tiny-a.v2") and not pattern.search("a..b") and not pattern.search("a/b"), path


def test_the_admin_key_is_required_and_is_not_the_api_key(make_client, bundles):
    c = make_client(admin_key=ADMIN_KEY, api_key="api-s3cret")
    body = {"bundle": str(bundles["b"])}
    api = {"X-API-Key": "api-s3cret"}
    for headers in ({}, api, {"X-Admin-Key": "wrong"}, {"Authorization": "Bearer api-s3cret"}):
        r = c.post(RELOAD, json=body, headers=headers)
        assert r.status_code == 401 and "admin key" in r.json()["detail"], headers
    assert c.post("/v1/predict", json={"text": "python"}, headers=api).json()["model"]["name"] == "tiny-a"
    assert c.post(RELOAD, json=body, headers=ADMIN).json()["model"]["name"] == "tiny-b"
    r = c.post(RELOAD, json={"bundle": str(bundles["a"])}, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert r.status_code == 200 and r.json()["model"]["name"] == "tiny-a"


def test_reload_targets_must_lie_under_the_bundle_root(make_client, bundles, tmp_path):
    outside = tmp_path / "elsewhere"
    shutil.copytree(bundles["b"], outside)
    escape = bundles["a"].parent / f"link-out-{tmp_path.name}"  # a symlink under the root to a bundle outside
    escape.symlink_to(outside)
    try:
        c = make_client(admin_key=ADMIN_KEY)  # default root: tiny-a's parent folder
        for target in (outside, bundles["a"].parent / ".." / tmp_path.name / "elsewhere"):
            r = c.post(RELOAD, json={"bundle": str(target)}, headers=ADMIN)
            assert r.status_code == 403 and "XTAG_BUNDLE_ROOT" in r.json()["detail"], target
            # the answer says which root, and the path as it was understood (normalised, no symlink followed)
            assert f"root is {bundles['a'].parent} " in r.json()["detail"] and f"{outside} does not" in r.text
        # a symlink out is refused as a missing name is (test_odd_targets_get_the_missing_name_answer)
        r = c.post(RELOAD, json={"bundle": str(escape)}, headers=ADMIN)
        assert r.status_code == 404 and r.json()["type"].endswith("not-a-bundle") and str(outside) not in r.text
        # with the root set to where it is, the same bundle loads
        c2 = make_client(admin_key=ADMIN_KEY, bundle_root=tmp_path)
        assert c2.post(RELOAD, json={"bundle": str(outside)}, headers=ADMIN).json()["model"]["name"] == "tiny-b"
    finally:
        escape.unlink()


def test_odd_targets_get_the_missing_name_answer(make_client, bundles, tmp_path):
    """Issue 30: a NUL in the name, a component over 255 bytes and a symlink loop answered 500; a symlink that
    leads out of the root answered 403 where a missing name answers 422 (now 404), which told symlinks from missing names."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "loop").symlink_to(root / "loop")
    (root / "out").symlink_to(bundles["b"])  # a real bundle, outside the root
    c = make_client(admin_key=ADMIN_KEY, bundle_root=root)
    answers = set()
    for name in ("missing", "a\x00b", "x" * 300, "loop", "loop/deeper", "out", f"{'y' * 256}/z"):
        for given in (name, str(root / name)):
            r = c.post(RELOAD, json={"bundle": given}, headers=ADMIN)
            assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json", (name, r.text)
            assert str(bundles["b"]) not in r.text
            detail = r.json()["detail"].replace(repr(given), "X").replace(str(root / name), "Y")
            answers.add((r.json()["type"], detail))
    assert len(answers) == 1, answers
    assert c.post("/v1/predict", json={"text": "python"}).json()["model"]["name"] == "tiny-a"


def test_missing_and_non_bundle_targets_get_the_same_answer(make_client, bundles, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    c = make_client(admin_key=ADMIN_KEY, bundle_root=tmp_path)
    answers = set()
    for name in ("empty", "missing", "file"):
        r = c.post(RELOAD, json={"bundle": str(tmp_path / name)}, headers=ADMIN)
        assert r.status_code == 404 and "still serving tiny-a" in r.json()["detail"]
        answers.add(r.json()["detail"].replace(str(tmp_path / name), "X"))
    assert len(answers) == 1, answers
    assert c.post("/v1/predict", json={"text": "python"}).json()["model"]["name"] == "tiny-a"


def test_a_relative_path_is_looked_up_under_the_root_then_the_working_directory(
    make_client, bundles, tmp_path, monkeypatch
):
    """Issue 38: `{"bundle": "bundles/x"}`, relative to where the server was started (`xtag serve
    bundles/debtags-xl`), was refused as "not a bundle directory under the bundle root"."""
    root = tmp_path / "bundles"  # the default root: the served bundle's parent
    shutil.copytree(bundles["a"], root / "tiny-a")
    shutil.copytree(bundles["b"], root / "tiny-b")
    monkeypatch.chdir(tmp_path)
    c = make_client(admin_key=ADMIN_KEY, bundle=root / "tiny-a")
    # as typed in the server's working directory
    assert c.post(RELOAD, json={"bundle": "bundles/tiny-b"}, headers=ADMIN).json()["model"]["name"] == "tiny-b"
    # as named under the root
    assert c.post(RELOAD, json={"bundle": "tiny-a"}, headers=ADMIN).json()["model"]["name"] == "tiny-a"
    # the root comes first: with a bundle at root/bundles/tiny-b too, that one is taken
    shutil.copytree(bundles["a"], root / "bundles" / "tiny-b")
    assert c.post(RELOAD, json={"bundle": "bundles/tiny-b"}, headers=ADMIN).json()["model"]["name"] == "tiny-a"
    # a miss names the absolute paths tried, the root and the working directory
    r = c.post(RELOAD, json={"bundle": "bundles/nope"}, headers=ADMIN)
    assert r.status_code == 404 and r.json()["type"].endswith("not-a-bundle")
    detail = r.json()["detail"]
    assert f"(tried {root / 'bundles' / 'nope'}, {root / 'nope'})" in detail, detail
    assert f"the bundle root is {root} (XTAG_BUNDLE_ROOT" in detail and f"working directory {tmp_path}" in detail
    # outside the root either way: 403 with both readings
    r = c.post(RELOAD, json={"bundle": "../elsewhere"}, headers=ADMIN)
    assert r.status_code == 403 and f"{tmp_path / 'elsewhere'} or {tmp_path.parent / 'elsewhere'} does not" in r.text
    assert c.post("/v1/predict", json={"text": "python"}).json()["model"]["name"] == "tiny-a"


@pytest.mark.parametrize(
    "headers,body",
    [
        ({"Content-Type": "text/plain"}, b""),  # what a foreign page's form or fetch sends without a preflight
        ({"Content-Type": "text/plain"}, b'{"bundle": null}'),
        ({"Content-Type": "application/x-www-form-urlencoded"}, b""),
        ({}, b""),
    ],
)
def test_reload_needs_a_json_content_type(make_client, headers, body):
    client = make_client(admin_key=ADMIN_KEY)
    before = client.app.state.registry.current
    r = client.post(RELOAD, content=body, headers={"Origin": "https://evil.example", **ADMIN, **headers})
    assert r.status_code == 415 and r.headers["content-type"] == "application/problem+json"
    assert client.app.state.registry.current is before  # nothing was reloaded
    assert "access-control-allow-origin" not in r.headers


def test_a_second_concurrent_reload_gets_409(make_client, monkeypatch):
    c = make_client(admin_key=ADMIN_KEY)
    c.headers.update(ADMIN)
    gate, entered = threading.Event(), threading.Event()
    real = registry.load_and_warm

    def slow(path, *rest):  # rest: warm-up text, device
        entered.set()
        gate.wait(STARTUP_S)
        return real(path, *rest)

    monkeypatch.setattr(registry, "load_and_warm", slow)
    first: list = []
    t = threading.Thread(target=lambda: first.append(c.post(RELOAD, json={})))
    t.start()
    try:
        assert entered.wait(STARTUP_S)
        r = c.post(RELOAD, json={})
        assert r.status_code == 409 and r.headers["content-type"] == "application/problem+json"
        assert "in progress" in r.json()["detail"]
    finally:
        gate.set()
        t.join()
    assert first[0].status_code == 200


def test_a_successful_reload_is_logged_with_old_and_new_versions(make_client, bundles, caplog):
    c = make_client(admin_key=ADMIN_KEY)
    with caplog.at_level(logging.INFO, logger="xtag.service"):
        assert c.post(RELOAD, json={"bundle": str(bundles["b"])}, headers=ADMIN).status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(version(bundles["a"]) in m and version(bundles["b"]) in m for m in lines), lines


def test_public_answers_show_no_server_paths(make_client, bundles):
    c = make_client(bundle=bundles["a"])
    folder = str(bundles["a"].parent)
    manifest = load_bundle(bundles["a"]).manifest
    assert folder in json.dumps(manifest)  # the training corpus path is in the manifest...
    for path in ("/v1/model", "/v1/stats", "/ready", "/v1/projects", "/v1/projects/tiny-a"):
        r = c.get(path)
        assert r.status_code == 200 and folder not in r.text, path  # ...but in no answer
    info = c.get("/v1/model").json()
    assert info["path"] == "tiny-a" and info["manifest"]["files"] == manifest["files"]
    assert info["manifest"]["training"]["config"]["corpus"] == "tiny-a.jsonl"


def test_startup_with_a_broken_bundle_names_no_path(make_client, bundles):
    c = make_client(wait=False, bundle=bundles["broken"])
    deadline = time.time() + STARTUP_S
    while "checksum" not in c.get("/ready").text and time.time() < deadline:
        time.sleep(0.02)
    r = c.get("/ready")
    assert r.status_code == 503 and "broken" in r.json()["detail"]
    assert str(bundles["broken"].parent) not in r.text


@pytest.fixture(scope="module")
def poisoned(bundles, tmp_path_factory):
    folder = tmp_path_factory.mktemp("poisoned")
    return {what: poisoned_bundle(bundles, folder / f"nan-{what}", what) for what in ("data", "bias")}


@pytest.mark.parametrize("what", ["data", "bias"])
def test_a_bundle_with_nan_weights_is_refused_and_the_old_one_serves(make_client, poisoned, what):
    c = make_client(admin_key=ADMIN_KEY, bundle_root=poisoned[what].parent)
    r = c.post(RELOAD, json={"bundle": str(poisoned[what])}, headers=ADMIN)
    assert r.status_code == 422 and "non-finite" in r.json()["detail"], r.text
    ready = c.get("/ready")
    assert ready.status_code == 200 and ready.json()["model"]["name"] == "tiny-a"
    assert "non-finite" in ready.json()["last_reload_error"]
    p = c.post("/v1/predict", json={"text": "python script"}).json()
    assert p["model"]["name"] == "tiny-a" and p["labels"]


def test_a_bundle_with_nan_weights_never_becomes_ready(make_client, poisoned):
    c = make_client(wait=False, bundle=poisoned["data"])
    deadline = time.time() + STARTUP_S
    while "non-finite" not in c.get("/ready").text and time.time() < deadline:
        time.sleep(0.05)
    r = c.get("/ready")
    assert r.status_code == 503 and "non-finite" in r.json()["detail"] and "level_2.npz" in r.json()["detail"]


@pytest.mark.parametrize(
    "labels,scores,words",
    [
        ([[-1, -1, -1]], [[0.0, 0.0, 0.0]], "no labels"),
        ([[2, 0, -1]], [[np.nan, 0.5, 0.0]], "non-finite"),
        ([[2, 0, 1]], [[0.7, np.inf, 0.1]], "non-finite"),
    ],
)
def test_warm_up_checks_the_predictions_not_just_that_they_ran(
    make_client, bundles, monkeypatch, labels, scores, words
):
    """Predictions a corrupt model can give without raising (NaN scores, an empty top-k) keep it out."""
    c = make_client(admin_key=ADMIN_KEY)

    def bad_predict(self, texts, k, beam_size, a):
        return Predictions(np.array(labels * len(texts)), np.array(scores * len(texts), dtype=np.float32))

    monkeypatch.setattr(ServedModel, "predict", bad_predict)
    r = c.post(RELOAD, json={"bundle": str(bundles["b"])}, headers=ADMIN)
    assert r.status_code == 422 and words in r.json()["detail"]
    assert c.get("/ready").json()["model"]["name"] == "tiny-a"
    assert words in c.get("/ready").json()["last_reload_error"]


def test_a_bundle_with_out_of_range_indices_is_refused_like_a_nan_one(make_client, bundles, tmp_path):
    """Issue 30: every value of rankers/engine/fm_node.npy set to 50,000,000, the manifest re-hashed: the reload
    answered 200 and the first prediction segfaulted the server. It is refused at load, naming the array."""
    from xtag.models.bundle.manifest import sha256

    bad = tmp_path / "bad-indices"
    shutil.copytree(bundles["a"], bad)
    rel = "rankers/engine/fm_node.npy"
    np.save(bad / rel, np.full_like(np.load(bad / rel), 50_000_000))
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["files"][rel] = sha256(bad / rel)
    (bad / "manifest.json").write_text(json.dumps(manifest))
    c = make_client(admin_key=ADMIN_KEY, bundle_root=tmp_path)
    r = c.post(RELOAD, json={"bundle": str(bad)}, headers=ADMIN)
    assert r.status_code == 422 and "bad-indices/rankers/engine/fm_node.npy: bad index array" in r.json()["detail"]
    assert str(tmp_path) not in r.text
    p = c.post("/v1/predict", json={"text": "python script"})
    assert p.status_code == 200 and p.json()["model"]["name"] == "tiny-a"


@pytest.mark.parametrize("how", ["unlisted symlink", "absolute manifest path"])
def test_a_refused_bundle_shows_no_server_path(make_client, bundles, tmp_path, how):
    """Issue 30: /ready named an unlisted symlink's absolute target, and echoed absolute paths of a manifest."""
    from xtag.models.bundle.manifest import sha256

    secret = tmp_path / "secret-place" / "target.json"
    secret.parent.mkdir()
    secret.write_text("{}")
    bad = tmp_path / "root" / "bad"
    shutil.copytree(bundles["a"], bad)
    if how == "unlisted symlink":
        (bad / "link.json").symlink_to(secret)
    else:
        manifest = json.loads((bad / "manifest.json").read_text())
        manifest["files"][str(secret)] = sha256(secret)
        (bad / "manifest.json").write_text(json.dumps(manifest))
    c = make_client(wait=False, bundle=bad)
    deadline = time.time() + STARTUP_S
    while "bad" not in c.get("/ready").text and time.time() < deadline:
        time.sleep(0.02)
    r = c.get("/ready")
    assert r.status_code == 503 and "bad: " in r.json()["detail"], r.text
    assert "secret-place" not in r.text and str(tmp_path) not in r.text, r.text
    ok = make_client(admin_key=ADMIN_KEY, bundle_root=bad.parent)
    r = ok.post(RELOAD, json={"bundle": "bad"}, headers=ADMIN)
    assert r.status_code == 422 and "secret-place" not in r.text and str(tmp_path) not in r.text, r.text


def test_public_messages_replace_any_absolute_path_left():
    """The loaders name files inside the bundle (shown relative to it); an absolute path anywhere else in a
    message, say in an OS error, is a server path and is not shown."""
    from pathlib import Path

    message = "/srv/xtag/bundles/b: cannot load (OSError: [Errno 5] I/O error: '/mnt/cache/x.npy'); see /var/log"
    public = registry.public_message(message, Path("/srv/xtag/bundles/b"))
    assert public == "b: cannot load (OSError: [Errno 5] I/O error: '<server path>'); see <server path>"
    kept = "b/rankers/level_2.npz: values 0..1 (1/2 of them), application/json"
    assert registry.public_message(kept, Path("/srv/xtag/bundles/b")) == kept
