"""A rollout policy: which version a model rolls out to, the steps of its traffic, and the gates each step must hold.

One schema for both ways in: a `[rollouts.NAME]` table of models.toml (read at start, `read_rollouts`) and the
body of `POST /v1/admin/models/{name}/rollout`. The service runs it (service/rollout/policy.py): the canary gets
`steps[0]` percent of the traffic, the next step after `interval_s` while the gates hold over the last
`window_s`, 100 % promotes it; a gate that fails sends all traffic back to the stable version at once.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DEFAULT_STEPS = (5, 25, 50, 100)


class Gates(BaseModel):
    """What the canary must hold against the stable version over the window (Argo Rollouts' analysis, in short).

    The error and latency gates judge only once both versions answered `min_requests` in the window: a few
    requests say nothing of a rate or a p99. The shadow gates apply to a version that shadowed its model first
    (service/state/shadow.py's comparison); a policy that sets one for a version that did not is refused."""

    model_config = ConfigDict(extra="forbid")

    max_error_rate_increase: float = Field(
        0.01, ge=0, le=1, description="the canary's 5xx share may exceed the stable version's by this much at most"
    )
    max_p99_ratio: float = Field(1.5, ge=1, description="canary p99 ≤ this × stable p99 + p99_slack_ms")
    p99_slack_ms: float = Field(
        5.0, ge=0, description="added to the p99 bound, so that two fast versions do not flap on a millisecond"
    )
    min_requests: int = Field(50, ge=1, le=1_000_000, description="answers of each version before a gate judges")
    min_top1_agreement: float | None = Field(
        None, ge=0, le=1, description="shadow gate: the share of documents whose first label both models agree on"
    )
    min_overlap_at_k: float | None = Field(None, ge=0, le=1, description="shadow gate: mean overlap@k")
    max_precision_drop: float | None = Field(
        None,
        ge=0,
        le=100,
        description="shadow gate: the canary's live P@1 (percent) at most this far below the stable's",
    )
    min_feedback_documents: int = Field(
        20, ge=1, description="documents with corrected labels before max_precision_drop judges"
    )

    @property
    def shadow_gated(self) -> bool:
        return any(x is not None for x in (self.min_top1_agreement, self.min_overlap_at_k, self.max_precision_drop))


class RolloutPolicy(BaseModel):
    """Roll `version` out: `steps` percent of the traffic, each held `interval_s` with its gates holding."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(min_length=1, max_length=64, description="the version rolled out (the canary)")
    steps: list[int] = Field(
        list(DEFAULT_STEPS), min_length=1, max_length=20, description="the canary's percent of traffic, rising to 100"
    )
    interval_s: float = Field(300.0, gt=0, le=7 * 86400, description="how long each step holds before the next")
    window_s: float | None = Field(
        None, gt=0, le=86400, description="the gates' window (the last window_s of answers); default interval_s"
    )
    gates: Gates = Gates()

    @model_validator(mode="after")
    def _rising_to_100(self) -> RolloutPolicy:
        if any(not 0 < s <= 100 for s in self.steps):
            raise ValueError(f"steps {self.steps}: each is a percent of the traffic, 1 to 100")
        if any(b <= a for a, b in zip(self.steps, self.steps[1:])):
            raise ValueError(f"steps {self.steps}: they must rise")
        if self.steps[-1] != 100:
            raise ValueError(f"steps {self.steps}: the last is 100 (the promotion)")
        return self

    @property
    def window(self) -> float:
        return self.window_s if self.window_s is not None else self.interval_s


def read_rollouts(path: Path) -> dict[str, RolloutPolicy]:
    """models.toml's `[rollouts.NAME]` tables (absent: none), each a RolloutPolicy; errors name the table."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the models file ({exc})") from None
    table = data.get("rollouts", {})
    if not isinstance(table, dict):
        raise ValueError(f"{path}: rollouts: a table of [rollouts.NAME] tables")
    out = {}
    for name, entry in table.items():
        try:
            out[name] = RolloutPolicy.model_validate(entry)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            where = ".".join(str(x) for x in error["loc"])
            raise ValueError(f"{path}: rollouts.{name}{'.' + where if where else ''}: {error['msg']}") from None
    return out
