"""The automatic rollout (service/rollout/policy.py, config/rollout_policy.py): steps advanced while the gates hold,
a rollback at once when one fails, a canary that fails to load stopping the rollout, every transition reported."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from xtag.config.rollout_policy import Gates, RolloutPolicy, read_rollouts
from xtag.config.settings import Settings
from xtag.service.observability.prometheus import LATENCY_BUCKETS
from xtag.service.rollout.policy import RolloutConflict, RolloutRefused, Rollouts, judge
from xtag.service.rollout.traffic import Hooks, Traffic, TrafficRefused
from xtag.service.rollout.window import GateWindows, WindowStats


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def slot(served: bool = True, loading: bool = False, error: str | None = None):
    """What Traffic and the policy read of a ModelSlot."""
    return SimpleNamespace(current=object() if served else None, loading=loading, last_error=error, unloaded=False)


class World:
    """One model with a stable version "1" and a canary "2", a fake clock, and the events the rollouts report."""

    def __init__(self, canary=None, interval_s: float = 10.0, window_s: float | None = None, **gates):
        self.clock = Clock()
        self.hooks = Hooks()
        self.traffic = Traffic("m", {"1": slot(), "2": canary or slot()}, hooks=self.hooks)
        self.windows = GateWindows(LATENCY_BUCKETS, self.clock)
        self.events: list[tuple[str, str]] = []
        self.rollouts = Rollouts(
            lambda name: self.traffic if name == "m" else None,
            self.windows,
            lambda r, kind, text: self.events.append((kind, text)),
            self.clock,
        )
        self.hooks.changed.append(self.rollouts.changed)
        self.policy = RolloutPolicy(
            version="2",
            steps=[5, 50, 100],
            interval_s=interval_s,
            window_s=window_s,
            gates=Gates(min_requests=20, **gates),
        )

    def answer(self, version: str, n: int, status: int = 200, seconds: float = 0.002) -> None:
        for _ in range(n):
            self.windows.observe("m", version, status, seconds)

    def run(self, duration: float, step: float = 1.0, **answers) -> None:
        """`duration` seconds in ticks of `step`, each with both versions answering (the canary as told)."""
        for _ in range(int(duration / step)):
            self.clock.t += step
            self.answer("1", 30)
            self.answer("2", 30, **answers)
            self.rollouts.tick()


def test_a_policy_is_checked_whole():
    assert RolloutPolicy(version="2").steps == [5, 25, 50, 100]
    for steps, why in (([5, 50], "last is 100"), ([50, 5, 100], "must rise"), ([0, 100], "1 to 100")):
        with pytest.raises(ValidationError, match=why):
            RolloutPolicy(version="2", steps=steps)
    with pytest.raises(ValidationError, match="Extra inputs"):
        RolloutPolicy(version="2", canary_percent=5)
    assert RolloutPolicy(version="2", interval_s=30).window == 30
    assert RolloutPolicy(version="2", interval_s=30, window_s=5).window == 5


def test_models_toml_rollouts_are_read_and_their_model_must_be_served(tmp_path):
    toml = tmp_path / "models.toml"
    toml.write_text(
        '[models]\nxl = "debtags-xl"\n[rollouts.xl]\nversion = "2"\nsteps = [10, 100]\ninterval_s = 60\n'
        "[rollouts.xl.gates]\nmax_p99_ratio = 2.0\n"
    )
    policy = Settings(_env_file=None, models_file=toml).model_set.rollouts["xl"]
    assert (policy.version, policy.steps, policy.gates.max_p99_ratio) == ("2", [10, 100], 2.0)
    toml.write_text('[models]\nxl = "debtags-xl"\n[rollouts.other]\nversion = "2"\n')
    with pytest.raises(ValidationError, match="rollouts.other: 'other' is not served"):
        Settings(_env_file=None, models_file=toml)
    toml.write_text('[models]\nxl = "x"\n[rollouts.xl]\nversion = "2"\n[rollouts.xl.gates]\nmax_p99_ratio = 0.5\n')
    with pytest.raises(ValueError, match=r"rollouts.xl.gates.max_p99_ratio: Input should be greater"):
        read_rollouts(toml)


def test_the_gates_judge_only_on_enough_answers():
    gates = Gates(min_requests=10)
    fast, slow = WindowStats(100, 0, 2.0), WindowStats(100, 0, 400.0)
    assert judge(gates, WindowStats(5, 5, 400.0), fast, None).failed is None  # too few to say
    assert not judge(gates, WindowStats(5, 5, 400.0), fast, None).ready
    assert "p99 400 ms over the gate" in judge(gates, slow, fast, None).failed
    assert "5xx rate 10.00% over the gate 1.00%" in judge(gates, WindowStats(100, 10, 2.0), fast, None).failed
    assert judge(gates, WindowStats(100, 1, 7.0), fast, None).failed is None  # 1 % and p99 ≤ 2 × 1.5 + 5 ms
    verdict = judge(gates, fast, fast, None)
    assert verdict.ready and verdict.failed is None


def test_the_shadow_gates_read_shadow_scorings_figures():
    gates = Gates(min_requests=1, min_top1_agreement=0.8, max_precision_drop=5, min_feedback_documents=2)
    ok = WindowStats(10, 0, 1.0)
    pair = {"window_documents": 50, "top1_agreement": 0.9, "overlap_at_k": 0.7}
    live = {"documents": 3, "primary": {"P@1": 80.0}, "shadow": {"P@1": 70.0}}
    assert "top1_agreement 0.700 under the gate 0.8" in judge(gates, ok, ok, {**pair, "top1_agreement": 0.7}).failed
    assert not judge(gates, ok, ok, pair).ready  # no feedback yet: holds, fails nothing
    assert "10 points under the stable's 80" in judge(gates, ok, ok, {**pair, "live": live}).failed
    good = {**pair, "live": {**live, "shadow": {"P@1": 78.0}}}
    assert judge(gates, ok, ok, good).ready and judge(gates, ok, ok, good).failed is None


def test_steps_advance_while_the_gates_hold_then_promote():
    w = World()
    w.rollouts.start("m", w.policy)
    assert w.traffic.held_by == "rollout to 2"
    w.rollouts.tick()
    assert w.traffic.weights == {"1": 95, "2": 5}
    w.run(9)
    assert w.traffic.weights == {"1": 95, "2": 5}  # the step holds interval_s
    w.run(1)
    assert w.traffic.weights == {"1": 50, "2": 50}
    w.run(10)
    assert (w.traffic.weights, w.traffic.stable, w.traffic.held_by) == ({"1": 0, "2": 100}, "2", None)
    assert [k for k, _ in w.events] == ["start", "step", "step", "promote"]
    state = w.rollouts.by_model["m"].as_json()
    assert (state["state"], state["step"], state["stable"]) == ("promoted", 3, "1")
    assert "m" not in w.windows.by_model  # the window is let go


def test_a_step_waits_for_enough_answers():
    w = World()
    w.rollouts.start("m", w.policy)
    w.rollouts.tick()
    for _ in range(30):  # time passes, the canary answers too little to judge
        w.clock.t += 1
        w.answer("1", 30)
        w.rollouts.tick()
    assert w.traffic.weights["2"] == 5 and w.rollouts.by_model["m"].gates["ready"] is False


@pytest.mark.parametrize(
    "fault, reason",
    [({"seconds": 0.4}, "p99"), ({"status": 500}, "5xx rate")],
)
def test_a_breach_rolls_back_within_one_window(fault, reason):
    w = World(interval_s=60.0, window_s=4.0)
    w.rollouts.start("m", w.policy)
    w.rollouts.tick()
    w.run(4, step=0.5, **fault)  # one window of the faulty canary
    r = w.rollouts.by_model["m"]
    assert r.state == "rolled_back" and reason in r.reason
    assert (w.traffic.weights["1"], w.traffic.stable, w.traffic.held_by) == (100, "1", None)
    assert w.events[-1][0] == "rollback" and reason in w.events[-1][1]


def test_a_canary_that_fails_to_load_stops_the_rollout_before_any_traffic():
    canary = slot(served=False, loading=True)
    w = World(canary=canary)
    w.rollouts.start("m", w.policy)
    w.rollouts.tick()
    assert w.rollouts.active("m").state == "waiting"  # loading: it waits
    canary.loading, canary.last_error = False, "manifest.json: sha256 mismatch"
    w.rollouts.tick()
    r = w.rollouts.by_model["m"]
    assert r.state == "stopped" and "failed to load: manifest.json: sha256 mismatch" in r.reason
    assert w.traffic.weights["1"] == 100 and w.traffic.held_by is None


def test_a_canary_lost_mid_rollout_rolls_back():
    canary = slot()
    w = World(canary=canary)
    w.rollouts.start("m", w.policy)
    w.rollouts.tick()
    canary.current, canary.last_error = None, "out of memory"
    w.rollouts.tick()
    assert w.rollouts.by_model["m"].state == "rolled_back" and w.traffic.weights["1"] == 100


def test_conflicts_and_refusals():
    w = World()
    with pytest.raises(RolloutRefused, match="already the stable"):
        w.rollouts.start("m", RolloutPolicy(version="1"))
    with pytest.raises(RolloutRefused, match="no version '9'"):
        w.rollouts.start("m", RolloutPolicy(version="9"))
    with pytest.raises(RolloutRefused, match="did not shadow"):
        w.rollouts.start("m", RolloutPolicy(version="2", gates=Gates(min_top1_agreement=0.9)))
    with pytest.raises(RolloutRefused, match="not served"):
        w.rollouts.start("other", w.policy)
    w.rollouts.start("m", w.policy)
    with pytest.raises(RolloutConflict, match="version 2 is being rolled out"):
        w.rollouts.start("m", w.policy)
    w.rollouts.tick()
    with pytest.raises(TrafficRefused, match="rollout") as exc:  # a promote during the rollout: 409
        w.traffic.promote("2")
    assert exc.value.status == 409 and w.traffic.weights == {"1": 95, "2": 5}


def test_an_admin_rollback_ends_the_rollout():
    w = World()
    w.rollouts.start("m", w.policy)
    w.rollouts.tick()
    w.traffic.rollback(by="admin", reason="looked wrong")
    r = w.rollouts.by_model["m"]
    assert r.state == "rolled_back" and r.reason == "rollback by admin: looked wrong"
    w.run(30)
    assert w.traffic.weights["1"] == 100  # it does not come back
    w.rollouts.start("m", w.policy)  # and a new one may start
