"""The rollout policy on a served model (issue 50): POST/GET /v1/admin/models/{name}/rollout, steps that advance
on their own while the gates hold, an automatic rollback within one gate window when the canary is slow or fails,
a canary that fails to load stopping the rollout, a promote during a rollout refused, and every transition in the
log, in Prometheus and on the dashboard's timeline. The fault is injected from the test: the canary's loaded model
is made slow here, no switch in the product."""

from __future__ import annotations

import logging
import shutil
import time

import pytest

from tests.service.svc_support import (  # noqa: F401  (pytest fixtures)
    ADMIN,
    ADMIN_KEY,
    STARTUP_S,
    bundles,
    make_client,
    tiny_corpus,
)

TEXT = {"text": "sql database query table", "k": 3}
# Short windows; a p99 slack above a loaded test machine's jitter on tiny bundles (a few ms, spikes of tens), under
# the slow canary's 150 ms; the errors case needs no latency gate at all.
FAST = {"window_s": 3.0, "gates": {"min_requests": 8, "max_p99_ratio": 1.5, "p99_slack_ms": 60.0}}
SLACK = {"slow": 60.0, "errors": 2000.0}


@pytest.fixture
def served(tmp_path, bundles, make_client):
    """Model "tags": version 0 fails to load, 1 (tiny-a) is stable with all the traffic, 2 (tiny-b) the canary."""
    for version, key in (("0", "broken"), ("1", "a"), ("2", "b")):
        shutil.copytree(bundles[key], tmp_path / "tags" / version)
    (tmp_path / "models.toml").write_text(
        '[models.tags]\nversions = {"0" = "tags/0", "1" = "tags/1", "2" = "tags/2"}\nstable = "1"\n'
    )
    c = make_client(bundle=None, bundle_root=tmp_path, admin_key=ADMIN_KEY, wait=False)
    deadline = time.monotonic() + STARTUP_S
    while any(v["state"] == "loading" for v in c.get("/v1/models/tags").json()["versions"]):
        assert time.monotonic() < deadline, "versions still loading"
        time.sleep(0.05)
    return c


def start(c, **policy):
    return c.post("/v1/admin/models/tags/rollout", json={"version": "2", **policy}, headers=ADMIN)


def state(c) -> dict:
    return c.get("/v1/admin/models/tags/rollout", headers=ADMIN).json()


def drive(c, until, timeout: float = 60.0) -> dict:
    """Requests to the model, unkeyed (so the split holds), until `until(state)` or the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _ in range(20):
            assert c.post("/v1/models/tags/predict", json=TEXT).status_code == 200
        now = state(c)
        if until(now):
            return now
    raise AssertionError(f"rollout did not get there in {timeout} s: {state(c)}")


def slow_canary(c, monkeypatch, seconds: float = 0.15) -> None:
    """The canary's loaded model answers `seconds` late (the fault, from the test)."""
    model = c.app.state.registry.traffic["tags"].versions["2"].current
    predict = model.predict

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return predict(*args, **kwargs)

    monkeypatch.setattr(model, "predict", slow)


def test_a_healthy_canary_is_stepped_up_and_promoted_on_its_own(served):
    c = served
    # a wide p99 slack: this test is not about latency, and a loaded test machine's jitter is tens of ms
    r = start(c, steps=[20, 50, 100], interval_s=0.5, window_s=1.0, gates={"min_requests": 5, "p99_slack_ms": 2000})
    assert r.status_code == 202, r.text
    assert r.json()["state"] in ("waiting", "running") and r.json()["stable"] == "1"
    seen = set()
    done = drive(c, lambda s: seen.add(s["canary_percent"]) or s["state"] != "running" and s["state"] != "waiting")
    assert done["state"] == "promoted", done
    assert {20, 50} <= seen
    traffic = c.get("/v1/admin/models/tags/traffic", headers=ADMIN).json()
    assert traffic["stable"] == "2" and traffic["weights"]["2"] == 100 and traffic["held_by"] is None
    kinds = [e["kind"] for e in c.get("/v1/timeline", params={"model": "tags"}).json()["events"]]
    assert {"rollout", "step", "promote"} <= set(kinds)
    metrics = c.get("/metrics").text
    assert 'xtag_rollout_events_total{event="promote",model="tags"} 1.0' in metrics
    assert 'xtag_rollout_events_total{event="step",model="tags"} 2.0' in metrics


@pytest.mark.parametrize("fault", ["slow", "errors"])
def test_a_faulty_canary_is_rolled_back_within_one_gate_window(served, monkeypatch, caplog, fault):
    c = served
    gates = {**FAST["gates"], "p99_slack_ms": SLACK[fault]}
    assert start(c, steps=[25, 100], interval_s=60.0, window_s=FAST["window_s"], gates=gates).status_code == 202
    drive(c, lambda s: s["state"] == "running", timeout=20)
    if fault == "slow":
        slow_canary(c, monkeypatch)
    else:  # the canary's model raises: its requests answer 500
        model = c.app.state.registry.traffic["tags"].versions["2"].current
        monkeypatch.setattr(model, "predict", lambda *a, **k: 1 / 0)
    caplog.set_level(logging.INFO, logger="xtag.service")
    began = time.monotonic()
    deadline = began + 2 * FAST["window_s"] + 20  # one window of answers, plus this loaded machine's slack
    while state(c)["state"] == "running":
        assert time.monotonic() < deadline, state(c)
        c.post("/v1/models/tags/predict", json=TEXT)
    took = time.monotonic() - began
    done = state(c)
    assert done["state"] == "rolled_back", done
    assert ("p99" if fault == "slow" else "5xx rate") in done["reason"]
    assert done["gates"]["canary"]["requests"] >= FAST["gates"]["min_requests"]
    traffic = c.get("/v1/admin/models/tags/traffic", headers=ADMIN).json()
    assert traffic["weights"]["1"] == 100 and traffic["stable"] == "1" and traffic["held_by"] is None
    for _ in range(30):  # all traffic on the stable version at once
        assert c.post("/v1/models/tags/predict", json=TEXT).headers["x-model-version"] == "1"
    assert any("rolled back to 1" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert 'xtag_rollout_events_total{event="rollback",model="tags"} 1.0' in c.get("/metrics").text
    assert "rollback" in [e["kind"] for e in c.get("/v1/timeline", params={"model": "tags"}).json()["events"]]
    print(f"rolled back {took:.2f} s after the fault ({fault}), window {FAST['window_s']} s")


def test_a_canary_that_failed_to_load_stops_the_rollout_with_the_reason(served):
    c = served
    r = start(c, version="0")
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 10
    while state(c)["state"] == "waiting":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    done = state(c)
    assert done["state"] == "stopped" and "version 0 failed to load" in done["reason"]
    assert c.get("/v1/admin/models/tags/traffic", headers=ADMIN).json()["weights"]["0"] == 0


def test_a_promote_or_second_rollout_during_a_rollout_is_refused(served):
    c = served
    assert start(c, interval_s=600).status_code == 202
    drive(c, lambda s: s["state"] == "running", timeout=20)
    again = start(c)
    assert again.status_code == 409 and "being rolled out" in again.json()["detail"]
    promote = c.post("/v1/admin/models/tags/promote", json={"version": "2"}, headers=ADMIN)
    assert promote.status_code == 409 and promote.json()["type"].endswith(":rollout-in-progress")
    weights = c.get("/v1/admin/models/tags/traffic", headers=ADMIN).json()["weights"]
    assert weights["2"] == 5  # unchanged
    back = c.post("/v1/admin/models/tags/rollback", json={"reason": "enough"}, headers=ADMIN)
    assert back.status_code == 200
    done = state(c)
    assert done["state"] == "rolled_back" and done["reason"] == "rollback by admin: enough"


def test_bad_policies_are_refused_and_the_plane_is_fenced(served):
    c = served
    assert start(c, version="1").status_code == 422  # the stable version
    assert start(c, version="9").status_code == 422
    assert start(c, steps=[50, 10]).status_code == 422
    assert start(c, gates={"min_top1_agreement": 0.9}).json()["type"].endswith(":rollout-refused")  # never shadowed
    assert c.post("/v1/admin/models/tags/rollout", json={"version": "2"}).status_code == 401
    assert c.get("/v1/admin/models/nope/rollout", headers=ADMIN).status_code == 404
    assert c.get("/v1/admin/models/tags/rollout", headers=ADMIN).json()["type"].endswith(":no-rollout")


def test_a_version_that_shadowed_first_is_judged_by_shadow_scorings_agreement(tmp_path, bundles, make_client):
    """Version 2's bundle shadowed the model first (a shadow model on the same directory): a policy with a shadow
    gate reads shadow scoring's own agreement, and rolls back when it is under the gate."""
    for version, key in (("1", "a"), ("2", "b")):
        shutil.copytree(bundles[key], tmp_path / "tags" / version)
    (tmp_path / "models.toml").write_text(
        '[models.tags]\nversions = {"1" = "tags/1", "2" = "tags/2"}\nstable = "1"\n'
        '[models.candidate]\npath = "tags/2"\nshadow_of = "tags"\n'
    )
    c = make_client(bundle=None, bundle_root=tmp_path, admin_key=ADMIN_KEY)
    deadline = time.monotonic() + STARTUP_S
    while any(v["state"] != "ready" for v in c.get("/v1/models/tags").json()["versions"]):
        assert time.monotonic() < deadline, "versions still loading"
        time.sleep(0.05)
    top1 = lambda v, text: c.post(f"/v1/models/tags/versions/{v}/predict", json={"text": text, "k": 3}).json()[  # noqa: E731
        "labels"
    ][0]["id"]
    texts = [row["text"] for row in tiny_corpus()]
    differ = next(t for t in texts if top1("1", t) != top1("2", t))  # the two bundles disagree on its first label
    policy = {"version": "2", "steps": [50, 100], "interval_s": 60, "window_s": 2.0}
    policy["gates"] = {"min_requests": 5, "min_top1_agreement": 0.5, "p99_slack_ms": 2000}  # not about latency
    r = c.post("/v1/admin/models/tags/rollout", json=policy, headers=ADMIN)
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 60
    while state(c)["state"] in ("waiting", "running"):
        assert time.monotonic() < deadline, state(c)
        c.post("/v1/models/tags/predict", json={"text": differ, "k": 3})
        time.sleep(0.01)  # room for the shadow's thread
    done = state(c)
    assert done["state"] == "rolled_back", done
    assert done["reason"].startswith("top1_agreement 0.") and "under the gate 0.5 (shadow scoring)" in done["reason"]
    assert done["gates"]["shadow"]["window_documents"] > 0


def test_a_models_toml_rollout_starts_with_the_server_and_a_bad_one_stops_it(tmp_path, bundles, make_client):
    from xtag.config.settings import Settings
    from xtag.models.errors import XtagError
    from xtag.service.app import create_app

    for version, key in (("1", "a"), ("2", "b")):
        shutil.copytree(bundles[key], tmp_path / "tags" / version)
    models = '[models.tags]\nversions = {"1" = "tags/1", "2" = "tags/2"}\nstable = "1"\n'
    rollout = '[rollouts.tags]\nversion = "2"\nsteps = [50, 100]\ninterval_s = 0.3\nwindow_s = 1.0\n'
    gates = "[rollouts.tags.gates]\nmin_requests = 3\np99_slack_ms = 2000\n"
    (tmp_path / "models.toml").write_text(models + rollout + gates)
    c = make_client(bundle=None, bundle_root=tmp_path, admin_key=ADMIN_KEY)  # ready: the stable version serves
    done = drive(c, lambda s: s["state"] not in ("waiting", "running"))
    assert done["state"] == "promoted" and done["policy"]["interval_s"] == 0.3
    (tmp_path / "models.toml").write_text(models + rollout.replace('version = "2"', 'version = "9"'))
    with pytest.raises(XtagError, match=r"rollouts.tags: model tags: no version '9'"):
        create_app(Settings(_env_file=None, bundle_root=tmp_path))
