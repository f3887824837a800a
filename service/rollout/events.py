"""Where a rollout's transitions show: the `xtag.service` log, Prometheus, and the dashboard's chart markers.

Every start, step, promotion, rollback and stop is one log line (its fields in JSON logs: event, model, version,
canary_percent, reason), one increment of `xtag_rollout_events_total{model, event}` (Grafana draws them as
annotations), the canary's share in `xtag_rollout_canary_percent{model}`, and one event in the model's timeline,
which the page marks on its charts (service/observability/timeline.py).
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge
from xtag.service.observability.timeline import Timelines
from xtag.service.rollout.policy import Rollout

log = logging.getLogger("xtag.service")
KINDS = ("start", "step", "promote", "rollback", "stop")
WARNING_KINDS = ("rollback", "stop")
MARKS = {"start": "rollout", "stop": "rollout-stop"}  # the timeline's event kinds, read on their own on the page


class RolloutEvents:
    """The rollout series, registered once on the app's registry, and the sink `Rollouts` reports to."""

    def __init__(self, registry, timelines: Timelines | None) -> None:
        self.timelines = timelines
        self.events = Counter(
            "xtag_rollout_events",
            "rollout transitions by model and event (start, step, promote, rollback, stop)",
            ["model", "event"],
            registry=registry,
        )
        self.percent = Gauge(
            "xtag_rollout_canary_percent",
            "the share of traffic (percent) a running rollout gives its canary; 0 when none runs",
            ["model"],
            registry=registry,
            multiprocess_mode="liveall",
        )

    def declare(self, model: str) -> None:
        """A served model's series at 0 before its first rollout: Prometheus's increase() (Grafana's annotations)
        sees a series' first value as its start, so without them the first event of each kind would not show."""
        for kind in KINDS:
            self.events.labels(model, kind)
        self.percent.labels(model).set(0)

    def __call__(self, rollout: Rollout, kind: str, text: str) -> None:
        log.log(
            logging.WARNING if kind in WARNING_KINDS else logging.INFO,
            "rollout %s",
            text,
            extra={
                "event": f"rollout_{kind}",
                "model": rollout.model,
                "version": rollout.policy.version,
                "canary_percent": rollout.weight,
                "reason": rollout.reason,
            },
        )
        self.events.labels(rollout.model, kind).inc()
        self.percent.labels(rollout.model).set(rollout.weight)
        if self.timelines is not None:
            self.timelines.get(rollout.model).mark(text, MARKS.get(kind, kind))
