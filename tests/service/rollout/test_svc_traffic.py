"""service/rollout/traffic.py alone (slots stand-ins): sticky routing by a hash the same in every process, shares
that follow the weights, a canary's keys kept as its weight grows, refusals that change nothing, promote and
rollback, a policy's hold, and the hooks told of every change."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from types import SimpleNamespace

import pytest
from xtag.service.rollout.traffic import Hooks, Traffic, TrafficRefused, sticky_bucket


def slot(ready: bool = True, error: str | None = None):
    return SimpleNamespace(current=object() if ready else None, last_error=error, loading=False)


def traffic(**more) -> Traffic:
    versions = {"1": slot(), "2": slot(), "3": slot(False, "checksum mismatch")}
    return Traffic("tags", versions, **more)


def test_the_stable_version_has_all_traffic_by_default_and_a_key_always_reaches_one_version():
    t = traffic(stable="1")
    assert t.weights == {"1": 100, "2": 0, "3": 0} and not t.split and t.route("anyone") == "1"
    t.set_weights({"1": 50, "2": 50})
    assert t.split
    for key in ("a", "user-17", "ü", ""):
        assert len({t.route(key) for _ in range(20)}) == 1


def test_the_key_hash_is_the_same_in_another_process():
    here = [sticky_bucket(f"user-{i}") for i in range(50)]
    code = (
        "from xtag.service.rollout.traffic import sticky_bucket; print([sticky_bucket(f'user-{i}') for i in range(50)])"
    )
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert str(here) == there.strip()


@pytest.mark.parametrize("weights", [{"1": 95, "2": 5}, {"1": 50, "2": 50}, {"1": 30, "2": 70}])
def test_shares_follow_the_weights_with_and_without_keys(weights):
    t = traffic(stable="1")
    t.set_weights(weights)
    unkeyed = Counter(t.route() for _ in range(20_000))
    keyed = Counter(t.route(f"user-{i}") for i in range(20_000))
    for version, weight in weights.items():
        assert abs(100 * unkeyed[version] / 20_000 - weight) < 1.5
        assert abs(100 * keyed[version] / 20_000 - weight) < 1.5


def test_a_canary_keeps_its_keys_as_its_weight_grows():
    t = traffic(stable="1")
    t.set_weights({"1": 95, "2": 5})
    on_canary = {k for k in (f"user-{i}" for i in range(5000)) if t.route(k) == "2"}
    t.set_weights({"1": 50, "2": 50})
    assert on_canary and all(t.route(k) == "2" for k in on_canary)


@pytest.mark.parametrize(
    ("weights", "status", "code"),
    [
        ({"1": 90}, 422, "invalid-weights"),
        ({"1": 50, "9": 50}, 422, "unknown-version"),
        ({"1": 50, "2": 50.0}, 422, "invalid-weights"),
        ({"1": 110, "2": -10}, 422, "invalid-weights"),
        ({"1": True, "2": 99}, 422, "invalid-weights"),
        ({"1": 50, "3": 50}, 409, "version-not-ready"),
    ],
)
def test_a_refused_change_says_why_and_changes_nothing(weights, status, code):
    hooks = Hooks()
    seen = []
    hooks.changed.append(seen.append)
    t = traffic(stable="1", hooks=hooks)
    t.set_weights({"1": 80, "2": 20})
    with pytest.raises(TrafficRefused) as exc:
        t.set_weights(weights)
    assert (exc.value.status, exc.value.code) == (status, code)
    assert t.weights == {"1": 80, "2": 20, "3": 0} and len(seen) == 1
    if code == "version-not-ready":
        assert "checksum mismatch" in str(exc.value)


def test_promote_then_rollback_twice_and_the_hooks_see_each_change():
    hooks = Hooks()
    seen = []
    hooks.changed.append(seen.append)
    t = traffic(stable="1", hooks=hooks)
    t.set_weights({"1": 95, "2": 5})
    assert t.rollback().after == {"1": 100, "2": 0, "3": 0} and t.stable == "1"  # the canary stopped
    t.promote("2", reason="good canary")
    assert (t.stable, t.previous, t.route("x")) == ("2", ["1"], "2")
    change = t.rollback(reason="p99")
    assert (change.stable, change.previous_stable, t.route("x")) == ("1", "2", "1")
    assert [(c.action, c.stable) for c in seen] == [
        ("weights", "1"),
        ("rollback", "1"),
        ("promote", "2"),
        ("rollback", "1"),
    ]
    with pytest.raises(TrafficRefused, match="cannot take traffic: checksum mismatch"):
        t.promote("3")
    with pytest.raises(TrafficRefused) as exc:
        Traffic("solo", {"1": slot()}).rollback()
    assert exc.value.code == "no-previous-version"


def test_a_routed_version_that_lost_its_model_sends_its_requests_to_the_stable_one():
    t = traffic(stable="1")
    t.set_weights({"1": 50, "2": 50})
    t.versions["2"].current = None  # unloaded, or failed since it got its weight
    assert {t.pick(f"user-{i}")[0] for i in range(200)} == {"1"}


def test_a_policy_holding_the_traffic_shuts_out_others_but_not_a_rollback():
    t = traffic(stable="1")
    t.hold("auto")
    with pytest.raises(TrafficRefused) as exc:
        t.set_weights({"1": 50, "2": 50})
    assert exc.value.code == "rollout-in-progress"
    t.set_weights({"1": 50, "2": 50}, by="auto")
    t.rollback(by="admin")
    assert t.held_by is None and t.weights["1"] == 100
