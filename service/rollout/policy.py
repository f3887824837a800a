"""The automatic rollout: a policy's steps applied to a model's traffic, advanced while its gates hold, rolled back
when one fails, with no person watching (KServe's canaryTrafficPercent driven by an Argo-style analysis).

A `Rollout` waits for its canary to load (a load that fails stops it, with the reason, before any traffic moves),
then gives the canary `steps[0]` percent; every tick it judges the gates over the window (service/rollout/
window.py, and shadow scoring's comparison for the shadow gates). A failed gate sends all traffic back to the
stable version at once; a step held `interval_s` with its gates holding on enough answers moves to the next,
and the last (100 %) promotes the canary. Each transition goes to `RolloutEvents` (log, Prometheus, the
dashboard's markers). The traffic itself is service/rollout/traffic.py's: the rollout holds it while it runs and
changes it only through set_weights, promote and rollback, so every change is checked, logged and hooked alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from xtag.config.rollout_policy import Gates, RolloutPolicy
from xtag.service.rollout.traffic import Traffic, TrafficChange, TrafficRefused
from xtag.service.rollout.window import SLICES, GateWindows, WindowStats

log = logging.getLogger("xtag.service")

ACTIVE = ("waiting", "running")  # the states a rollout still acts in; the others are final
TICK_S = 1.0  # how often rollouts are judged: at most this, or each slice of the shortest running window
MIN_TICK_S = 0.05  # however short a window: the ticker never spins
MAX_FINISHED = 64  # finished rollouts kept for GET (one per model, the latest): bounded all the same


class RolloutConflict(Exception):
    """A rollout asked while another of the model runs, or while someone else holds its traffic (409); a promote or
    weights asked meanwhile are refused by the traffic itself (Traffic.hold)."""


class RolloutRefused(ValueError):
    """A policy this model cannot run (422): the canary is already the stable version, or it never shadowed."""


@dataclass
class Rollout:
    """One model's rollout and where it stands; `as_json` is GET's answer."""

    model: str
    stable: str
    policy: RolloutPolicy
    started: float  # time.time()
    state: str = "waiting"  # waiting → running → promoted | rolled_back | stopped
    step: int = -1  # index into policy.steps; -1 before the first
    step_since: float = 0.0  # monotonic
    reason: str | None = None  # why it rolled back or stopped
    gates: dict = field(default_factory=dict)  # the last judgement: each version's window, each gate's verdict

    @property
    def holder(self) -> str:
        """The name it holds the traffic under (TrafficChange.by)."""
        return f"rollout to {self.policy.version}"

    @property
    def weight(self) -> int:
        return self.policy.steps[self.step] if self.step >= 0 and self.state in ACTIVE else 0

    def as_json(self) -> dict:
        return {
            "model": self.model,
            "version": self.policy.version,
            "stable": self.stable,
            "state": self.state,
            "step": self.step + 1,
            "steps": self.policy.steps,
            "canary_percent": self.weight,
            "started": round(self.started, 3),
            "reason": self.reason,
            "gates": self.gates,
            "policy": self.policy.model_dump(),
        }


@dataclass
class Verdict:
    """A judgement of the gates: `failed` names the first gate that failed; `ready` says every judging gate had its
    answers (a step advances only on a ready, passing verdict)."""

    failed: str | None
    ready: bool
    detail: dict


def judge(gates: Gates, canary: WindowStats, stable: WindowStats, shadow: dict | None) -> Verdict:
    """The gates over one window: the canary's 5xx share and p99 against the stable version's (once both have
    `min_requests` answers), and the shadow gates on shadow scoring's figures (`shadow`: GET /v1/shadow's pair)."""
    detail: dict = {
        "canary": {"requests": canary.requests, "error_rate": round(canary.error_rate, 5), "p99_ms": canary.p99_ms},
        "stable": {"requests": stable.requests, "error_rate": round(stable.error_rate, 5), "p99_ms": stable.p99_ms},
    }
    failed = None
    ready = min(canary.requests, stable.requests) >= gates.min_requests
    if ready:
        bound = stable.error_rate + gates.max_error_rate_increase
        if canary.error_rate > bound:
            failed = f"5xx rate {canary.error_rate:.2%} over the gate {bound:.2%} (stable {stable.error_rate:.2%})"
        p99_bound = (stable.p99_ms or 0.0) * gates.max_p99_ratio + gates.p99_slack_ms
        detail["p99_bound_ms"] = round(p99_bound, 3)
        if failed is None and (canary.p99_ms or 0.0) > p99_bound:
            failed = f"p99 {canary.p99_ms:g} ms over the gate {p99_bound:.3g} ms (stable {stable.p99_ms:g} ms)"
    if gates.shadow_gated:
        shadow_failed, shadow_ready = _judge_shadow(gates, shadow or {}, detail)
        failed, ready = failed or shadow_failed, ready and shadow_ready
    return Verdict(failed, ready, detail)


def _judge_shadow(gates: Gates, pair: dict, detail: dict) -> tuple[str | None, bool]:
    """The shadow gates on the pair's agreement means and live P@1 (None until it compared anything)."""
    detail["shadow"] = {k: pair.get(k) for k in ("window_documents", "top1_agreement", "overlap_at_k")}
    for gate, key in (("min_top1_agreement", "top1_agreement"), ("min_overlap_at_k", "overlap_at_k")):
        bound, value = getattr(gates, gate), pair.get(key)
        if bound is not None and value is not None and value < bound:
            return f"{key} {value:.3f} under the gate {bound:g} (shadow scoring)", True
    ready = all(
        pair.get(key) is not None
        for gate, key in (("min_top1_agreement", "top1_agreement"), ("min_overlap_at_k", "overlap_at_k"))
        if getattr(gates, gate) is not None
    )
    if gates.max_precision_drop is not None:
        live = pair.get("live") or {}
        primary, canary = live.get("primary", {}).get("P@1"), live.get("shadow", {}).get("P@1")
        detail["shadow"]["live"] = live
        if live.get("documents", 0) >= gates.min_feedback_documents and None not in (primary, canary):
            if primary - canary > gates.max_precision_drop:
                return f"live P@1 {canary:g} is {primary - canary:.3g} points under the stable's {primary:g}", True
        else:
            ready = False
    return None, ready


class RolloutEvents(Protocol):
    """Where a rollout's transitions go: `kind` is start, step, promote, rollback or stop."""

    def __call__(self, rollout: Rollout, kind: str, text: str) -> None: ...


def canary_failure(traffic: Traffic, version: str) -> str | None:
    """Why `version` cannot serve (its load failed, or it was unloaded); None while it loads or serves."""
    slot = traffic.versions[version]
    if slot.current is not None or slot.loading:
        return None
    return slot.last_error or ("unloaded" if slot.unloaded else None)


class Rollouts:
    """The rollouts of one server, at most one running per model. `tick` moves them (`keep_ticking`, the app's task, calls
    it on the event loop, where traffic changes are made, every `tick_s`), `changed` hears traffic changes made by others (an
    admin's rollback ends the rollout). While it runs, a rollout holds its model's traffic (Traffic.hold): another
    caller's weights or promote is refused with 409."""

    def __init__(
        self,
        traffic_of: Callable[[str], Traffic | None],
        windows: GateWindows,
        events: RolloutEvents,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.traffic_of, self.windows, self.events, self.clock = traffic_of, windows, events, clock
        self.by_model: dict[str, Rollout] = {}

    def active(self, model: str) -> Rollout | None:
        found = self.by_model.get(model)
        return found if found is not None and found.state in ACTIVE else None

    def start(self, model: str, policy: RolloutPolicy, shadow: dict | None = None) -> Rollout:
        """Begin rolling `policy.version` out (`shadow`: its shadow scoring's figures, if it shadowed the model);
        RolloutConflict while one runs, RolloutRefused for a policy that cannot run. The traffic moves at the
        next tick once the canary serves."""
        traffic = self.traffic_of(model)
        if traffic is None:
            raise RolloutRefused(f"model {model}: not served")
        running = self.active(model)
        if running is not None or traffic.held_by is not None:
            what = f"version {running.policy.version} is being rolled out" if running else f"{traffic.held_by} holds it"
            raise RolloutConflict(f"model {model}: {what}; roll it back first")
        if policy.version not in traffic.versions:
            raise RolloutRefused(
                f"model {model}: no version {policy.version!r} (versions: {', '.join(traffic.versions)})"
            )
        if policy.version == traffic.stable:
            raise RolloutRefused(f"model {model}: version {policy.version} is already the stable version")
        if policy.gates.shadow_gated and shadow is None:
            raise RolloutRefused(
                f"model {model}: the policy has shadow gates, but version {policy.version} did not shadow it"
            )
        if len(self.by_model) >= MAX_FINISHED:  # keep the latest per model, and a bounded number of models
            for name in [n for n, r in self.by_model.items() if r.state not in ACTIVE][:1]:
                del self.by_model[name]
        rollout = self.by_model[model] = Rollout(model, traffic.stable, policy, time.time())
        traffic.hold(rollout.holder)
        self.windows.track(model, policy.window)
        self.events(rollout, "start", f"{model}: rolling out {policy.version} in steps {policy.steps}")
        return rollout

    def tick_s(self) -> float:
        """How long until the next tick: a slice of the shortest running window (so a breach is seen within a
        slice of the window), at most TICK_S."""
        running = [r.policy.window / SLICES for r in self.by_model.values() if r.state in ACTIVE]
        return max(MIN_TICK_S, min([TICK_S, *running]))

    def shadow_wanted(self) -> list[tuple[str, str]]:
        """(model, canary) of the running rollouts with shadow gates: their figures are read off the loop (live
        P@k reads the feedback store) and handed to `tick`."""
        return [
            (r.model, r.policy.version)
            for r in self.by_model.values()
            if r.state in ACTIVE and r.policy.gates.shadow_gated
        ]

    def tick(self, shadow: dict[tuple[str, str], dict | None] | None = None) -> None:
        """Move every running rollout one judgement on (on the event loop)."""
        for rollout in [r for r in self.by_model.values() if r.state in ACTIVE]:
            traffic = self.traffic_of(rollout.model)
            if traffic is None:  # the model was unloaded: nothing left to roll
                self._end(
                    rollout, "stopped", "stop", f"{rollout.model}: rollout stopped: the model is no longer served"
                )
                continue
            try:
                self._tick(rollout, traffic, (shadow or {}).get((rollout.model, rollout.policy.version)))
            except TrafficRefused as exc:  # a step the traffic refused (the stable version stopped serving)
                self._roll_back(rollout, traffic, f"the traffic refused the next step: {exc}")

    def changed(self, change: TrafficChange) -> None:
        """Traffic.hooks' `changed`: a change by someone else (an admin's rollback) ends the model's rollout."""
        rollout = self.active(change.model)
        if rollout is not None and change.by != rollout.holder:
            rollout.reason = f"{change.action} by {change.by}" + (f": {change.reason}" if change.reason else "")
            self._end(
                rollout,
                "rolled_back",
                "rollback",
                f"{rollout.model}: rollout of {rollout.policy.version} ended: {rollout.reason}",
            )

    def _tick(self, r: Rollout, traffic: Traffic, shadow: dict | None) -> None:
        version, now = r.policy.version, self.clock()
        failure = canary_failure(traffic, version)
        if failure is not None:
            if r.state == "waiting":
                traffic.hold(None)
                r.reason = f"version {version} failed to load: {failure}"
                return self._end(r, "stopped", "stop", f"{r.model}: rollout of {version} stopped: {r.reason}")
            return self._roll_back(r, traffic, f"version {version} is not served: {failure}")
        if r.state == "waiting":
            if traffic.served(version) is not None:
                self._step(r, traffic, 0, now)
            return None
        verdict = judge(
            r.policy.gates, self.windows.stats(r.model, version), self.windows.stats(r.model, r.stable), shadow
        )
        r.gates = {**verdict.detail, "failed": verdict.failed, "ready": verdict.ready}
        if verdict.failed is not None:
            return self._roll_back(r, traffic, verdict.failed)
        if now - r.step_since >= r.policy.interval_s and verdict.ready:
            return self._step(r, traffic, r.step + 1, now)
        return None

    def _step(self, r: Rollout, traffic: Traffic, step: int, now: float) -> None:
        percent, version = r.policy.steps[step], r.policy.version
        if percent == 100:  # the last step is the promotion
            traffic.promote(version, by=r.holder, reason="every gate held")
            traffic.hold(None)
            r.step = step
            return self._end(r, "promoted", "promote", f"{r.model}: {version} promoted to 100% (was {r.stable})")
        traffic.set_weights({r.stable: 100 - percent, version: percent}, by=r.holder)
        r.state, r.step, r.step_since = "running", step, now
        self.events(r, "step", f"{r.model}: {percent}% to {version} (step {step + 1} of {len(r.policy.steps)})")
        return None

    def _roll_back(self, r: Rollout, traffic: Traffic, why: str) -> None:
        r.reason = why
        r.state = "rolled_back"  # first: the change it makes is its own, not an admin's (changed)
        try:
            traffic.rollback(by=r.holder, reason=why)
        except TrafficRefused as exc:  # no version to go back to serves: said, and the hold given back
            traffic.hold(None)
            r.reason = f"{why}; the rollback was refused: {exc}"
        self._end(r, "rolled_back", "rollback", f"{r.model}: rolled back to {r.stable}: {why}")

    def _end(self, r: Rollout, state: str, kind: str, text: str) -> None:
        r.state = state
        self.windows.forget(r.model)
        self.events(r, kind, text)


async def keep_ticking(rollouts: Rollouts, shadow_figures: Callable[[str, str], dict | None]) -> None:
    """The app's ticker (a task of its lifespan): judge the rollouts every `tick_s` on the event loop, where
    traffic changes, after reading the shadow gates' figures on a thread (live P@k reads the feedback store)."""
    while True:
        await asyncio.sleep(rollouts.tick_s())
        wanted = rollouts.shadow_wanted()
        try:
            figures = await asyncio.to_thread(lambda: {w: shadow_figures(*w) for w in wanted}) if wanted else None
            rollouts.tick(figures)
        except Exception:  # a bug in one judgement must not end every rollout's ticker
            log.exception("rollout tick failed")
