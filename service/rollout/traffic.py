"""One model's traffic between its versions: weights, the stable version, promote, rollback, sticky routing.

A model name can have several versions (bundles under ROOT/NAME/VERSION/, or a models.toml `versions` table),
each loaded in a ModelSlot of its own (service/state/model_slot.py). `Traffic` says which version answers a
request: its integer weights (summing to 100) fill a table of 100 buckets in the versions' order, and a request
lands in the bucket of a stable hash of its routing key (the X-Routing-Key header, else its document's id), or
in a random one without a key. One key therefore reaches one version while the weights stand, in every worker
process; and since each version keeps its place in the table, a canary's range only grows as its weight does,
so the keys it already had stay on it through a ramp (5 → 50 → 100 %).

Every change (weights, promote, rollback) is checked whole before anything changes (a refusal leaves the traffic
in force), then made with one assignment, logged, and told to `Hooks.changed`. `Hooks.answered` sees every
answered request of a served model as (model, version, status, seconds): what a rollout policy's gates read.
Changes happen on the event loop only.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xtag.config.model_set import TOTAL_WEIGHT, weights_problem
from xtag.models.errors import XtagError

if TYPE_CHECKING:
    from xtag.service.state.model_slot import ModelSlot, ServedModel

log = logging.getLogger("xtag.service")

BUCKETS = TOTAL_WEIGHT  # one bucket per percent
ROUTING_HEADER = "x-routing-key"  # a request's sticky key; else its (first) document's id
VERSION_HEADER = "X-Model-Version"  # every prediction answer names the version that gave it


class TrafficRefused(XtagError):
    """A traffic change that cannot be made; nothing changed. `status` and `code` are its HTTP answer."""

    status, code = 422, "invalid-traffic"

    def __init__(self, message: str, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status or self.status
        self.code = code or self.code


@dataclass(frozen=True)
class TrafficChange:
    """One change of a model's traffic, as logged, counted and told to `Hooks.changed`."""

    model: str
    action: str  # weights | promote | rollback
    before: dict[str, int]
    after: dict[str, int]
    stable: str
    previous_stable: str | None
    by: str  # who asked: "admin", "config", or a policy's name
    reason: str = ""
    at: float = field(default_factory=time.time)


Answered = Callable[[str, str, int, float], None]  # (model, version, status, seconds)
Changed = Callable[[TrafficChange], None]


class Hooks:
    """The subscribers of one server: `answered` for every answered prediction request of a served model, `changed`
    for every traffic change. Subscribers run on the event loop and must be quick."""

    def __init__(self) -> None:
        self.answered: list[Answered] = []
        self.changed: list[Changed] = []

    def answer(self, model: str, version: str, status: int, seconds: float) -> None:
        for fn in self.answered:
            fn(model, version, status, seconds)

    def change(self, change: TrafficChange) -> None:
        for fn in self.changed:
            fn(change)


def sticky_bucket(key: str) -> int:
    """The bucket of a routing key: a hash that is the same in every process and every run (Python's hash() is
    salted per process, so `--workers N` would split one key's requests)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BUCKETS


class Traffic:
    """The versions of model `model` (name → slot, in table order), their weights and the stable version.

    `previous` is the stable versions before this one, newest last: rollback returns to the newest that still
    serves. `held_by` names a rollout policy that owns the traffic: other callers' weights and promotes are then
    refused (409) until it lets go; a rollback is always taken, and ends the hold."""

    def __init__(
        self,
        model: str,
        versions: Mapping[str, ModelSlot],
        weights: Mapping[str, int] | None = None,
        stable: str | None = None,
        hooks: Hooks | None = None,
    ):
        if not versions:
            raise TrafficRefused(f"model {model}: no version to serve")
        self.model = model
        self.versions: dict[str, ModelSlot] = dict(versions)
        self.hooks = hooks or Hooks()
        self.previous: list[str] = []
        self.held_by: str | None = None
        first = next(iter(self.versions))
        self.stable = stable if stable is not None else first
        self._check_known([self.stable], "stable")
        self.weights: dict[str, int] = {}
        self._table: list[str] = []
        self._only: str | None = None
        self._apply(self._checked(weights if weights else {self.stable: 100}, ready=False))

    # routing: the hot path
    def route(self, key: str | None = None) -> str:
        """The version for a request with routing `key` (sticky), or for one without (weighted random)."""
        if self._only is not None:
            return self._only
        return self._table[random.randrange(BUCKETS) if key is None else sticky_bucket(key)]

    @property
    def split(self) -> bool:
        """Whether more than one version has traffic (only then does a request's routing key matter)."""
        return self._only is None

    def served(self, version: str) -> ServedModel | None:
        """The model a version serves now (None while it loads, or failed)."""
        slot = self.versions.get(version)
        return None if slot is None else slot.current

    def pick(self, key: str | None = None) -> tuple[str, ServedModel | None]:
        """(version, its model) for a request: the routed version, or the stable one while the routed one has no
        model (unloaded or failed since it got its weight): a request never meets a version that cannot answer."""
        version = self.route(key)
        model = self.versions[version].current
        if model is None and version != self.stable:
            version = self.stable
            model = self.versions[version].current
        return version, model

    # changes
    def set_weights(self, weights: Mapping[str, int], by: str = "admin", reason: str = "") -> TrafficChange:
        """Route by `weights` from now on (versions left out get 0); refused whole (TrafficRefused) for an unknown
        version, weights that are not whole, not ≥ 0 or do not sum to 100, weight on a version not ready, or
        while a rollout owned by someone else holds the traffic."""
        self._check_holder(by)
        checked = self._checked(weights)
        return self._change("weights", checked, self.stable, by, reason)

    def promote(self, version: str, by: str = "admin", reason: str = "") -> TrafficChange:
        """`version` takes all the traffic and becomes the stable version (the old stable is kept for rollback)."""
        self._check_holder(by)
        self._check_known([version], "promote")
        checked = self._checked({version: 100})
        return self._change("promote", checked, version, by, reason)

    def rollback(self, by: str = "admin", reason: str = "") -> TrafficChange:
        """All traffic back on the stable version at once, or, when the stable version already has it all, on the
        previous stable one (which becomes stable again). Ends any rollout's hold."""
        target = self.stable
        if self.weights.get(self.stable) == 100:
            target = next((v for v in reversed(self.previous) if self.served(v) is not None), None)
            if target is None:
                raise TrafficRefused(
                    f"model {self.model}: nothing to roll back to: {self.stable} has all the traffic and no previous "
                    "stable version serves",
                    409,
                    "no-previous-version",
                )
        if self.served(target) is None:
            raise TrafficRefused(
                f"model {self.model}: cannot roll back to version {target}: it does not serve", 409, "version-not-ready"
            )
        self.held_by = None
        return self._change("rollback", {v: BUCKETS if v == target else 0 for v in self.versions}, target, by, reason)

    def hold(self, by: str | None) -> None:
        """A rollout policy takes (`by`) or gives back (None) the traffic: see the class docstring."""
        self.held_by = by

    # what GET /v1/models shows
    def describe(self) -> dict:
        return {
            "stable": self.stable,
            "weights": dict(self.weights),
            "previous_stable": self.previous[-1] if self.previous else None,
            "held_by": self.held_by,
        }

    # inside
    def _check_holder(self, by: str) -> None:
        if self.held_by is not None and by != self.held_by:
            raise TrafficRefused(
                f"model {self.model}: a rollout ({self.held_by}) is in progress; roll back or wait for it to end",
                409,
                "rollout-in-progress",
            )

    def _check_known(self, versions, what: str) -> None:
        unknown = [v for v in versions if v not in self.versions]
        if unknown:
            raise TrafficRefused(
                f"model {self.model}: {what}: no version {unknown[0]!r} (versions: {', '.join(self.versions)})",
                422,
                "unknown-version",
            )

    def _checked(self, weights: Mapping[str, int], ready: bool = True) -> dict[str, int]:
        """`weights` over every version (0 for those left out), or TrafficRefused saying what is wrong."""
        problem = weights_problem(dict(weights), list(self.versions))
        if problem is not None:
            raise TrafficRefused(f"model {self.model}: {problem[1]}", 422, problem[0])
        if ready:
            down = [v for v, w in weights.items() if w > 0 and self.served(v) is None]
            if down:
                slot = self.versions[down[0]]
                why = slot.last_error or ("still loading" if slot.loading else "not loaded")
                raise TrafficRefused(
                    f"model {self.model}: version {down[0]} cannot take traffic: {why}", 409, "version-not-ready"
                )
        return {v: int(weights.get(v, 0)) for v in self.versions}

    def _change(self, action: str, weights: dict[str, int], stable: str, by: str, reason: str) -> TrafficChange:
        before, old_stable = dict(self.weights), self.stable
        if stable != old_stable:
            self.previous = [v for v in self.previous if v != stable] + [old_stable]
        self.stable = stable
        self._apply(weights)
        change = TrafficChange(
            self.model,
            action,
            before,
            dict(self.weights),
            stable,
            self.previous[-1] if self.previous else None,
            by,
            reason,
        )
        split = ", ".join(f"{v} {w}%" for v, w in self.weights.items() if w)
        log.info(
            "model %s: traffic %s by %s: %s (stable %s)%s",
            self.model,
            action,
            by,
            split,
            stable,
            f": {reason}" if reason else "",
            extra={
                "event": "traffic_changed",
                "model": self.model,
                "action": action,
                "weights": dict(self.weights),
                "before": before,
                "stable": stable,
                "by": by,
                "reason": reason,
            },
        )
        self.hooks.change(change)
        return change

    def _apply(self, weights: dict[str, int]) -> None:
        """The new weights and their bucket table (changes run on the event loop, between two requests)."""
        self.weights = weights
        self._table = [v for v, w in weights.items() for _ in range(w)]
        self._only = next((v for v, w in weights.items() if w == BUCKETS), None)
