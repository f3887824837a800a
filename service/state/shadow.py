"""Shadow scoring: a model declared the shadow of another scores the same requests, after they were answered.

The prediction routes hand each answered request of a shadowed model to its ShadowScorer as a background task,
which runs once the response has been sent (Starlette's BackgroundTask): the client never waits for the shadow.
With a `shadow_fraction` below 1 only a sample of the primary's documents is handed over (`sampled`): the rest cost
the primary nothing at all (no job, no background task, no queue). The scorer queues the request in a bounded queue (XTAG_SHADOW_QUEUE) and scores what gathered there on a thread
of its own, in one call (_drain); a request that finds the queue full is shed and counted, so a slow shadow compares fewer
documents instead of falling behind or holding memory. A shadow call that raises or takes over
XTAG_SHADOW_TIMEOUT_S counts as an error (asked to stop; the next request waits for its thread, and sheds
meanwhile). Nothing here can change the primary's answer or status: it was sent before the shadow started.

Each compared document feeds an AgreementWindow (service/observability/agreement.py) whose means, and the live P@k of
both models on the documents the feedback store holds corrected labels for, are exported as Prometheus series
labelled with both names (`model`: the primary, `shadow`) and on GET /v1/shadow.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from prometheus_client import Counter, Gauge
from starlette.background import BackgroundTask
from xtag.models.engine.search import share_cores
from xtag.models.inference.stopping import StopFlag
from xtag.models.threads import thread_count
from xtag.service.http.hangups import stopping
from xtag.service.observability.agreement import AgreementWindow
from xtag.service.state.model_slot import ServedModel

log = logging.getLogger("xtag.service")
SHADOW_NICE = 19  # the shadow thread's priority: the lowest, it runs on what the requests leave idle
LINGER_S = 0.05  # how long the shadow lets requests gather before it scores them together
JOB_KEY = "xtag.shadow"  # the scope key where predict_rows leaves the request's ShadowJob for its handler


def _one_core() -> None:
    """The shadow thread's engine calls use one core's share of numba's threads, and its graphs have one intra-op
    thread (ModelRepository.options_for): its batches leave the other cores to the primary's requests, which on 2
    cores otherwise met a shadow batch running on both (bench/RESULTS.md, "Per-model series and shadow scoring").
    The thread also runs at nice SHADOW_NICE (Linux sets a thread's own): it gets the CPU the requests leave, and
    what it cannot score in time is shed and counted, so that a shadow costs its primary little on a small machine."""
    share_cores(thread_count())
    with contextlib.suppress(OSError, AttributeError):  # another OS: the thread keeps the process's priority
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SHADOW_NICE)


class ShadowMetrics:
    """The shadow series, registered once on the app's registry; children per (primary, shadow) pair."""

    def __init__(self, registry) -> None:
        pair = ["model", "shadow"]
        self.documents = Counter(
            "xtag_shadow_documents", "documents scored by the shadow and compared", pair, registry=registry
        )
        self.shed = Counter(
            "xtag_shadow_shed_documents",
            "documents the shadow did not score because XTAG_SHADOW_QUEUE requests already waited for it",
            pair,
            registry=registry,
        )
        self.unserved = Counter(
            "xtag_shadow_unserved_documents",
            "documents not compared because the shadow model was not served (loading, failed or unloaded)",
            pair,
            registry=registry,
        )
        self.errors = Counter(
            "xtag_shadow_errors",
            "shadow calls that raised or timed out (XTAG_SHADOW_TIMEOUT_S)",
            pair,
            registry=registry,
        )
        gauge = {"registry": registry, "multiprocess_mode": "liveall"}
        self.top1 = Gauge(
            "xtag_shadow_top1_agreement", "share of compared documents whose first label is the same", pair, **gauge
        )
        self.overlap = Gauge("xtag_shadow_overlap_at_k", "mean share of the k labels both returned", pair, **gauge)
        self.rank = Gauge("xtag_shadow_rank_correlation", "mean Kendall tau-b of the two top-k rankings", pair, **gauge)
        self.live = Gauge(
            "xtag_shadow_live_precision",
            "P@k (percent) of `scored` (the primary or the shadow) on the compared documents whose id has corrected "
            "labels in the feedback store",
            [*pair, "scored", "k"],
            **gauge,
        )
        self.live_documents = Gauge(
            "xtag_shadow_feedback_documents",
            "compared documents with corrected labels in the feedback store",
            pair,
            **gauge,
        )


class ShadowUnserved(LookupError):
    """The shadow model is not served now: its documents are counted as unserved, not as an error."""


@dataclass
class ShadowJob:
    """One answered request, as the shadow needs it: the texts, their ids, the options and the primary's labels."""

    scorer: ShadowScorer
    texts: list[str]
    ids: list[str | None]
    k: int
    reweight: tuple | None  # (scheme, alpha, beta) of the request's reweighting, applied with the shadow's weights
    rerank: bool
    names: list[str]  # the primary's label names
    labels: np.ndarray  # the primary's top-k label ids, -1 padded

    def background(self) -> BackgroundTask:
        return BackgroundTask(self.scorer.offer, self)


class ShadowScorer:
    """Scores the requests of `primary` with the model `resolve()` returns (the shadow as served now)."""

    def __init__(
        self,
        primary: str,
        shadow: str,
        resolve: Callable[[], ServedModel | None],
        metrics: ShadowMetrics,
        queue_size: int = 64,
        timeout_s: float = 5.0,
        window: int = 10_000,
        fraction: float = 1.0,
    ):
        self.primary, self.shadow, self.resolve, self.timeout_s = primary, shadow, resolve, timeout_s
        self.fraction = fraction  # the share of the primary's documents scored (XTAG_SHADOW_FRACTION)
        self.window = AgreementWindow(window)
        self.queue: asyncio.Queue[ShadowJob] | None = None
        self.queue_size = queue_size
        self.executor: ThreadPoolExecutor | None = None
        self.task: asyncio.Task | None = None
        self.half_full: asyncio.Event | None = None  # ends the gathering early: the queue is half full
        m = metrics
        self.documents, self.shed, self.errors = (c.labels(primary, shadow) for c in (m.documents, m.shed, m.errors))
        self.unserved = m.unserved.labels(primary, shadow)
        self.unserved_logged = False  # whether "not served" was logged since the shadow last scored
        self.top1, self.overlap, self.rank = (g.labels(primary, shadow) for g in (m.top1, m.overlap, m.rank))
        self.metrics = metrics
        self.counts = {  # for /v1/shadow
            "documents": 0,
            "shed_documents": 0,
            "unserved_documents": 0,
            "unsampled_documents": 0,
            "errors": 0,
        }

    def job(self, texts, ids, k, reweight, rerank, primary: ServedModel, labels: np.ndarray) -> ShadowJob | None:
        """The shadow's work for an answered request: its sampled documents (all at fraction 1), None when none is."""
        if self.fraction < 1.0:
            keep = [i for i, doc_id in enumerate(ids) if sampled(doc_id, self.fraction)]
            self.counts["unsampled_documents"] += len(ids) - len(keep)
            if not keep:
                return None
            if len(keep) < len(ids):
                texts, ids, labels = [texts[i] for i in keep], [ids[i] for i in keep], labels[keep]
        return ShadowJob(self, texts, ids, k, reweight, rerank, primary.names, labels)

    async def offer(self, job: ShadowJob) -> None:
        """Queue an answered request for the shadow, or shed it (counted) when XTAG_SHADOW_QUEUE already wait."""
        if self.queue is None:  # made on the loop that serves (the first request's), again after a restart
            self.queue = asyncio.Queue(self.queue_size)
            self.half_full = asyncio.Event()
            self.executor = ThreadPoolExecutor(1, thread_name_prefix="xtag-shadow", initializer=_one_core)
            self.task = asyncio.get_running_loop().create_task(self._drain())
        try:
            self.queue.put_nowait(job)
            if self.queue.qsize() * 2 >= self.queue_size:
                self.half_full.set()
        except asyncio.QueueFull:
            self.shed.inc(len(job.texts))
            self.counts["shed_documents"] += len(job.texts)

    async def _drain(self) -> None:
        """Score what waits, LINGER_S after the first request came (sooner once the queue is half full), in one predictor call per set of options: a
        shadow's results are wanted soon, not at once, and one call of many texts costs far less than as many calls
        (on debtags XR-Linear, per-call overhead is most of a one-text call), so it takes the CPU from the primary
        less often."""
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self.queue.get()]
            with contextlib.suppress(TimeoutError):  # fast traffic: go when half the queue is taken, not later
                await asyncio.wait_for(self.half_full.wait(), LINGER_S)
            self.half_full.clear()
            while not self.queue.empty():
                jobs.append(self.queue.get_nowait())
            stop = StopFlag()
            future = loop.run_in_executor(self.executor, stopping, self._score, stop, jobs)
            try:
                await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
            except ShadowUnserved:
                self._unserved(jobs)
            except TimeoutError:
                stop.set()
                self._failed(jobs, f"took over {self.timeout_s:g} s (XTAG_SHADOW_TIMEOUT_S)")
                with contextlib.suppress(Exception):  # one shadow call at a time: the queue sheds meanwhile
                    await future
            except Exception as exc:  # the shadow's failure is counted, never the primary's
                self._failed(jobs, f"{type(exc).__name__}: {exc}")

    def _unserved(self, jobs: list[ShadowJob]) -> None:
        """The shadow is not served (loading, failed, unloaded): its documents are counted, and said once in the log
        until it scores again, not once per batch (issue 47: one WARNING per batch flooded the log)."""
        documents = sum(len(job.texts) for job in jobs)
        self.unserved.inc(documents)
        self.counts["unserved_documents"] += documents
        if not self.unserved_logged:
            self.unserved_logged = True
            log.warning(
                "shadow %s of %s is not served: its primary's requests are not compared until it is "
                "(counted in xtag_shadow_unserved_documents_total)",
                self.shadow,
                self.primary,
                extra={"event": "shadow_unserved", "model": self.primary, "shadow": self.shadow},
            )

    def _failed(self, jobs: list[ShadowJob], why: str) -> None:
        self.errors.inc()
        self.counts["errors"] += 1
        log.warning(
            "shadow %s of %s failed on %d documents: %s",
            self.shadow,
            self.primary,
            sum(len(job.texts) for job in jobs),
            why,
            extra={"event": "shadow_failed", "model": self.primary, "shadow": self.shadow},
        )

    def _score(self, jobs: list[ShadowJob]) -> None:
        """On the shadow's thread: predict as the requests asked (one call per set of options), then compare each
        document's two lists."""
        model = self.resolve()
        if model is None:
            raise ShadowUnserved(self.shadow)
        self.unserved_logged = False  # served again: a later absence is logged again
        groups: dict[tuple, list[ShadowJob]] = {}
        for job in jobs:
            groups.setdefault((job.k, job.reweight, job.rerank), []).append(job)
        for (k, reweight, rerank), same in groups.items():
            gains = None if reweight is None else model.gains(*reweight)
            texts = [t for job in same for t in job.texts]
            labels = model.predict(texts, min(k, model.n_labels), None, gains, rerank).labels
            if model.series is not None:
                model.series.observe_batch(len(texts))
            at = 0
            for job in same:
                for i, doc_id in enumerate(job.ids):
                    primary = [job.names[j] for j in job.labels[i] if j >= 0]
                    shadow = [model.names[j] for j in labels[at + i] if j >= 0]
                    self.window.add(doc_id, primary, shadow, k)
                at += len(job.texts)
            self.documents.inc(len(texts))
            self.counts["documents"] += len(texts)
        means = self.window.means()
        self.top1.set(means["top1_agreement"])
        self.overlap.set(means["overlap_at_k"])
        self.rank.set(means["rank_correlation"])

    def summary(self, labels_for: Callable[[list[str]], dict[str, list[str]]] | None) -> dict:
        """The comparison as JSON (GET /v1/shadow), the live P@k gauges published on the way (call off the loop:
        it reads the feedback store)."""
        out = {
            "model": self.primary,
            "shadow": self.shadow,
            **self.counts,
            **self.window.means(),
        }
        if labels_for is not None:
            live = self.window.live_precision(labels_for)
            self.metrics.live_documents.labels(self.primary, self.shadow).set(live["documents"])
            for side, name in (("primary", self.primary), ("shadow", self.shadow)):
                for at, value in live[side].items():
                    self.metrics.live.labels(self.primary, self.shadow, name, at.removeprefix("P@")).set(value)
            out["live"] = {"documents": live["documents"], self.primary: live["primary"], self.shadow: live["shadow"]}
        return out

    def close(self) -> None:
        """Stop scoring (the app's shutdown); the next request after a restart starts again."""
        if self.task is not None:
            self.task.cancel()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
        self.queue = self.task = self.executor = self.half_full = None


def sampled(key: str | None, fraction: float) -> bool:
    """Whether a document is in a shadow's sample: by a hash of its id when it has one, so that the same documents
    are compared on every worker, replica and run (agreement and live P@k compare like with like); else by chance."""
    if key is None:
        return random.random() < fraction
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


def declare(app, primary: str, shadow: str, resolve: Callable[[], ServedModel | None]) -> ShadowScorer:
    """Make `shadow` (found by `resolve`) score the requests of `primary` from its next load on, and at once if
    `primary` serves now (app.py's swap listener attaches it to every model loaded under that name)."""
    s = app.state.settings
    scorer = ShadowScorer(
        primary,
        shadow,
        resolve,
        app.state.shadow_metrics,
        s.models.shadow_queue,
        s.models.shadow_timeout_s,
        s.models.shadow_window,
        s.model_set.shadow_fractions.get(shadow, 1.0),
    )
    app.state.shadows[primary] = scorer
    return scorer


def served(registry, name: str) -> ServedModel | None:
    """The model served as `name` now (None while it loads, failed or was unloaded): a shadow follows its reloads."""
    slot = registry.slots.get(name)
    return None if slot is None else slot.current


def feedback_labels(app) -> Callable[[list[str]], dict[str, list[str]]] | None:
    """The feedback store's ids → labels lookup: the writer's store, else the configured one if it exists; None
    when there is no store (live P@k is then absent)."""
    from pathlib import Path

    from xtag.service.state.feedback_store import POSTGRES_SCHEMES, FeedbackStore

    state = app.state
    if state.feedback is not None:
        return state.feedback.store.labels_by_id
    target = state.settings.feedback.feedback_db
    if getattr(state, "feedback_reader", None) is None:
        if not target.startswith(POSTGRES_SCHEMES) and not Path(target).is_file():
            return None
        state.feedback_reader = FeedbackStore(target, state.settings.feedback.feedback_timeout_s)
    return state.feedback_reader.labels_by_id


def summaries(app) -> list[dict]:
    """Every shadow pair's comparison, live P@k included where the store can say (blocking: call off the loop)."""
    if not app.state.shadows:
        return []
    try:
        labels_for = feedback_labels(app)
    except Exception as exc:  # an unreachable store costs the live P@k only
        log.warning("shadow scoring: the feedback store cannot be read: %s", exc)
        labels_for = None
    out = []
    for scorer in list(app.state.shadows.values()):
        try:
            out.append(scorer.summary(labels_for))
        except Exception as exc:  # a store failing mid-read: the figures without live P@k
            log.warning("shadow scoring: live P@k of %s unavailable: %s", scorer.primary, exc)
            out.append(scorer.summary(None))
    return out


def rollout_figures(app, model: str, version: str) -> dict | None:
    """Shadow scoring's comparison for a rollout's shadow gates (service/rollout/policy.py): the pair of `model`
    whose shadow serves the bundle directory of its `version` (that version shadowed it first), with `live` as
    {documents, primary, shadow}; None when no shadow of `model` serves that bundle. Blocking: call off the loop."""
    from pathlib import Path

    scorer, traffic = app.state.shadows.get(model), app.state.registry.traffic.get(model)
    shadow_slot = app.state.registry.slots.get(scorer.shadow) if scorer is not None else None
    canary = traffic.versions.get(version) if traffic is not None else None
    if shadow_slot is None or canary is None or None in (shadow_slot.path, canary.path):
        return None
    if Path(shadow_slot.path).resolve() != Path(canary.path).resolve():
        return None
    try:
        labels_for = feedback_labels(app)
    except Exception as exc:  # an unreachable store costs the live P@k only
        log.warning("shadow scoring: the feedback store cannot be read: %s", exc)
        labels_for = None
    out = scorer.summary(labels_for)
    if "live" in out:
        live = out["live"]
        out["live"] = {"documents": live["documents"], "primary": live[scorer.primary], "shadow": live[scorer.shadow]}
    return out
