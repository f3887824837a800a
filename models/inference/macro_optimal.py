"""Batch-level macro-optimal inference over shortlisted candidates (Schultheis, thesis ch. 4, §4.3–4.5).

Per-document re-ranking (models/inference/reweighting.py) is optimal only for metrics that are *linear* in
each label's confusion matrix. Macro-F1@k is not: whether predicting label j for one document pays
off depends on how often j is predicted elsewhere. This module chooses the k labels of every
document of a batch *jointly*, from each document's shortlist (candidate label ids and their
probability estimates η, -1 / any score for padding), for

    Ψ = (1 − α)·P@k + α·macro-X@k,   macro-X ∈ {macro-F1, macro-recall}        (thesis §4.5)

with P@k = Σ_j t_j / (n·k), macro-F1 = (1/m) Σ_j 2t_j / (p_j + q_j), macro-recall =
(1/m) Σ_j t_j / p_j (t: true positives, q: predicted positives, p: ground-truth positives of label
j; m = all labels of the model, 0/0 := 0, as in models/metrics.py). Note that α mixes the metric
*values*; reweighting.py's α mixes rescaled label weights, so the two alphas are not the same axis.

Two algorithms:

- ``bca`` — expected test utility (ETU, §4.3) under the semi-empirical approximation (eq. 4.15–4.16):
  t̃_j = Σ_i ŷ_ij·η_ij, p̃_j = Σ_i η_ij, q_j = Σ_i ŷ_ij. Block-coordinate ascent with one block per
  document, visited in random order: remove the document's contribution from the running confusion
  counts, choose its k labels optimally given all the others, add it back (the online update of
  §4.3, O(candidates) per step). A sweep never lowers the approximated objective; we stop when a
  sweep improves it by less than `tol` (relative), after `max_sweeps`, or at `max_seconds`.
- ``fw`` — population utility (PU, §4.4): Frank-Wolfe over randomised classifiers, with the batch's
  η as the population estimate. Each step linearises Ψ at the current confusion tensor
  (G = ∇Ψ(C), eq. 4.23), solves the linear problem by top_k(a·η + b) (eq. 4.21–4.22), and line-
  searches between the old and new confusion tensors. The result is a mixture of deterministic
  top-k classifiers; each document draws one of them (seeded), which realises the mixture.

Deviations from the thesis, on purpose:
- Only shortlisted candidates can be chosen; a label outside a document's shortlist has η = 0
  there (the thesis' §4.5 remark: shortlisted η with the rest taken as zero).
- The BCA block step uses the exact marginal change of Ψ for each candidate (possible because Ψ
  is a sum over labels), not the first-order gains of eq. 4.18; the step is then exactly optimal.
- BCA starts from the plain top-k by η, so its result never scores below top-k on the
  approximated objective (the thesis also allows random starts).
- FW line search: a 21-point grid, then golden-section refinement around the best grid point
  (exact for the unimodal cases we meet, robust when not).

Caps: one call takes at most MAX_DOCS documents (memory is O(documents × candidates)) and stops
at `max_seconds` (≤ MAX_SECONDS) with the best solution so far, which is always a valid top-k.
The serving path (`predict_optimized`) allows SERVING_MAX_DOCS documents and SERVING_MAX_SECONDS.
Batch optimality needs a batch: p̃ is estimated from the batch itself, so below a few hundred
documents the estimates are noisy and the result tends towards spreading predictions over labels.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from xtag.models.errors import XtagError
from xtag.models.inference.reweighting import Predicts, candidate_budget
from xtag.models.inference.types import Predictions

Metric = Literal["macro-f1", "macro-recall"]
Method = Literal["bca", "fw"]
METRICS: tuple[str, ...] = ("macro-f1", "macro-recall")
METHODS: tuple[str, ...] = ("bca", "fw")

MAX_DOCS = 200_000
MAX_SECONDS = 600.0
DEFAULT_MAX_SECONDS = 30.0
SERVING_MAX_DOCS = 1024
SERVING_MAX_SECONDS = 1.0
_TIME_CHECK_EVERY = 64  # BCA steps between clock reads
_EPS = 1e-12


class OptimizeConfig(BaseModel):
    """What to optimise and how long to try; the defaults suit offline evaluation."""

    model_config = ConfigDict(extra="forbid")

    metric: Metric = "macro-f1"
    alpha: float = Field(1.0, ge=0.0, le=1.0, description="weight of the macro metric; 1 − alpha goes to P@k")
    method: Method = "bca"
    max_seconds: float = Field(DEFAULT_MAX_SECONDS, gt=0.0, le=MAX_SECONDS)
    max_sweeps: int = Field(10, ge=1, le=1000, description="BCA: passes over the batch")
    max_iters: int = Field(30, ge=1, le=1000, description="FW: linearisation steps")
    tol: float = Field(1e-4, ge=0.0, description="stop when a sweep/step improves Ψ by less (relative)")
    seed: int = 0


@dataclass
class OptimizeResult:
    """Chosen labels (best η first, -1 padding) and how the optimisation went.

    `objective_*` are the semi-empirical Ψ (eq. 4.16, in [0, 1]) of plain top-k and of the result;
    `label_ids`, `tp`, `predicted`, `positives` are the result's t̃, q, p̃ over the labels that
    occur in the batch's shortlists (label_ids[c] is the model's label id of compact index c).
    """

    labels: np.ndarray
    scores: np.ndarray
    objective_start: float
    objective: float
    steps: int
    seconds: float
    stopped: str
    label_ids: np.ndarray
    tp: np.ndarray
    predicted: np.ndarray
    positives: np.ndarray
    history: list[float] = field(default_factory=list)


class _Objective:
    """Ψ(t, q) for fixed p̃, n, m, k, α, vectorised over labels, with its per-label marginal gains."""

    def __init__(self, metric: str, alpha: float, p: np.ndarray, n: int, m: int, k: int):
        if metric not in METRICS:
            raise XtagError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
        self.metric, self.alpha, self.p = metric, float(alpha), p
        self.w_prec = (1.0 - self.alpha) / (n * k)  # P@k = Σ t_j / (n k)
        self.w_macro = self.alpha / m  # macro average over all m labels of the model
        self.inv_p = np.where(p > 0, 1.0 / np.maximum(p, _EPS), 0.0)

    def value(self, t: np.ndarray, q: np.ndarray) -> float:
        if self.metric == "macro-f1":
            macro = np.sum(2.0 * t / np.maximum(self.p + q, _EPS))
        else:
            macro = np.sum(t * self.inv_p)
        return float(self.w_prec * t.sum() + self.w_macro * macro)

    def gain(self, t: np.ndarray, q: np.ndarray, p: np.ndarray, inv_p: np.ndarray, eta: np.ndarray) -> np.ndarray:
        """Exact change of Ψ when a document with estimates η additionally predicts each label."""
        if self.metric == "macro-f1":
            den = p + q
            macro = 2.0 * ((t + eta) / (den + 1.0) - t / np.maximum(den, _EPS))
        else:
            macro = eta * inv_p
        return self.w_prec * eta + self.w_macro * macro

    def gradient(self, t: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(∂Ψ/∂t, ∂Ψ/∂q) per label: the a and b of eq. 4.21 (a = G00+G11−G01−G10 = ∂Ψ/∂t, b = G01−G00 = ∂Ψ/∂q
        when the confusion matrix is written through t, q, p: tp = t, fp = q − t, fn = p − t)."""
        if self.metric == "macro-f1":
            den = self.p + q
            live = den > 0
            safe = np.maximum(den, _EPS)
            a = np.where(live, 2.0 / safe, 0.0)
            b = np.where(live, -2.0 * t / safe**2, 0.0)
        else:
            a, b = self.inv_p, np.zeros_like(q)
        return self.w_prec + self.w_macro * a, self.w_macro * b


@dataclass
class _Batch:
    """The shortlists in compact label indices: ids n × K (padding → index u), η (0 for padding)."""

    ids: np.ndarray
    eta: np.ndarray
    valid: np.ndarray
    label_ids: np.ndarray
    k: int

    @property
    def u(self) -> int:
        return len(self.label_ids)

    def counts(self, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """t̃ and q of a selection (n × k positions into the shortlists), recomputed from scratch.

        Arrays have u + 1 entries: the last is the padding slot and stays 0."""
        rows = np.arange(self.ids.shape[0])[:, None]
        ok = self.valid[rows, chosen]
        ids, eta = self.ids[rows, chosen][ok], self.eta[rows, chosen][ok]
        return (
            np.bincount(ids, weights=eta, minlength=self.u + 1),
            np.bincount(ids, minlength=self.u + 1).astype(np.float64),
        )

    def top_k(self, gains: np.ndarray) -> np.ndarray:
        """n × k positions of the best gains per row; padding only where a row has fewer than k candidates."""
        g = np.where(self.valid, gains, -np.inf)
        K = g.shape[1]
        if K <= self.k:
            return np.broadcast_to(np.arange(K), (g.shape[0], K)).copy()
        return np.argpartition(-g, self.k - 1, axis=1)[:, : self.k]


def _prepare(candidate_ids: np.ndarray, eta: np.ndarray, k: int, n_labels: int) -> _Batch:
    ids = np.asarray(candidate_ids)
    scores = np.asarray(eta, dtype=np.float64)
    if ids.ndim != 2 or ids.shape != scores.shape:
        raise XtagError(f"candidate ids {ids.shape} and probabilities {scores.shape} must be two n × K arrays")
    if k < 1:
        raise XtagError(f"k must be at least 1, got {k}")
    if ids.shape[0] > MAX_DOCS:
        raise XtagError(f"macro-optimal inference takes at most {MAX_DOCS} documents per call, got {ids.shape[0]}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise XtagError("candidate ids must be integers")
    valid = ids >= 0
    if np.any(ids[valid] >= n_labels):
        raise XtagError(f"candidate ids must be below the label count {n_labels}")
    valid &= np.isfinite(scores)
    bad = valid & ((scores < -1e-6) | (scores > 1 + 1e-6))
    if bad.any():
        raise XtagError(
            "probability estimates must lie in [0, 1]; calibrate the bundle (xtag calibrate) or pass probabilities"
        )
    srt = np.sort(np.where(valid, ids, -1 - np.arange(ids.shape[1])[None, :]), axis=1)  # padding made unique
    if np.any(srt[:, 1:] == srt[:, :-1]):
        raise XtagError("a document's candidate list repeats a label")
    label_ids, inverse = np.unique(ids[valid], return_inverse=True)
    compact = np.full(ids.shape, len(label_ids), dtype=np.int64)
    compact[valid] = inverse
    return _Batch(compact, np.where(valid, np.clip(scores, 0.0, 1.0), 0.0), valid, label_ids, k)


def _output(batch: _Batch, chosen: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Model label ids and η of the chosen positions, best η first, padded to k with -1 / -inf."""
    rows = np.arange(n)[:, None]
    ok = batch.valid[rows, chosen]
    eta = np.where(ok, batch.eta[rows, chosen], -np.inf)
    order = np.argsort(-eta, axis=1, kind="stable")
    chosen, eta, ok = (np.take_along_axis(a, order, 1) for a in (chosen, eta, ok))
    ids = np.append(batch.label_ids, -1)[batch.ids[rows, chosen]]
    labels = np.where(ok, ids, -1).astype(np.int64)
    if labels.shape[1] < k:
        pad = ((0, 0), (0, k - labels.shape[1]))
        labels, eta = np.pad(labels, pad, constant_values=-1), np.pad(eta, pad, constant_values=-np.inf)
    return labels, eta.astype(np.float32)


def _bca(batch: _Batch, obj: _Objective, cfg: OptimizeConfig, start: float) -> tuple[np.ndarray, list[float], int, str]:
    """Block-coordinate ascent (§4.3) with online confusion updates; returns positions, Ψ per sweep, steps, reason."""
    chosen = batch.top_k(batch.eta)  # start: plain top-k by η
    t, q = batch.counts(chosen)
    p, inv_p = obj.p, obj.inv_p
    history = [obj.value(t, q)]
    # Rows with ≤ k candidates have only one feasible choice: they never move.
    movable = np.flatnonzero(batch.valid.sum(axis=1) > batch.k)
    rng = np.random.default_rng(cfg.seed)
    ids, eta, valid, k = batch.ids, batch.eta, batch.valid, batch.k
    steps = 0
    for _ in range(cfg.max_sweeps):
        for n_done, i in enumerate(rng.permutation(movable)):
            if n_done % _TIME_CHECK_EVERY == 0 and time.perf_counter() - start > cfg.max_seconds:
                history.append(obj.value(t, q))
                return chosen, history, steps, "time"
            c, e, cur = ids[i], eta[i], chosen[i]
            old = c[cur]
            t[old] -= e[cur]  # online update: take document i out of the confusion counts ...
            q[old] -= 1.0
            g = obj.gain(t[c], q[c], p[c], inv_p[c], e)
            g[~valid[i]] = -np.inf
            new = np.argpartition(-g, k - 1)[:k]
            sel = c[new]
            t[sel] += e[new]  # ... and back in with its new labels: O(candidates) per step
            q[sel] += 1.0
            chosen[i] = new
            steps += 1
        history.append(obj.value(t, q))
        if history[-1] - history[-2] <= cfg.tol * max(abs(history[-2]), _EPS):
            return chosen, history, steps, "converged"
    return chosen, history, steps, "max_sweeps"


def _line_search(f: Callable[[float], float], grid: int = 21, rounds: int = 20) -> float:
    """argmax of f on [0, 1]: grid, then golden-section search in the bracket around the best grid point."""
    gs = np.linspace(0.0, 1.0, grid)
    vals = [f(g) for g in gs]
    b = int(np.argmax(vals))
    best_g, best_v = gs[b], vals[b]
    lo, hi = gs[max(b - 1, 0)], gs[min(b + 1, grid - 1)]
    r = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - r * (hi - lo), lo + r * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(rounds):
        if f1 >= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - r * (hi - lo)
            f1 = f(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + r * (hi - lo)
            f2 = f(x2)
    for g, v in ((x1, f1), (x2, f2)):
        if v > best_v:
            best_g, best_v = g, v
    return float(best_g)


def _fw(batch: _Batch, obj: _Objective, cfg: OptimizeConfig, start: float) -> tuple[np.ndarray, list[float], int, str]:
    """Frank-Wolfe (§4.4) on the batch's η; returns positions drawn from the final randomised classifier."""
    ids = batch.ids
    classifiers: list[tuple[np.ndarray, np.ndarray]] = [(np.ones(batch.u + 1), np.zeros(batch.u + 1))]  # top-k by η
    weights = [1.0]
    t, q = batch.counts(batch.top_k(batch.eta))
    history = [obj.value(t, q)]
    stopped, steps = "max_iters", 0
    for _ in range(cfg.max_iters):
        if time.perf_counter() - start > cfg.max_seconds:
            stopped = "time"
            break
        a, b = obj.gradient(t, q)  # G = ∇Ψ(C) (eq. 4.23)
        chosen = batch.top_k(a[ids] * batch.eta + b[ids])  # linear problem: top_k(a·η + b) (eq. 4.21-4.22)
        t_new, q_new = batch.counts(chosen)
        dt, dq = t_new - t, q_new - q
        gamma = _line_search(lambda g: obj.value(t + g * dt, q + g * dq))
        value = obj.value(t + gamma * dt, q + gamma * dq)
        steps += 1
        if gamma <= 0.0 or value - history[-1] <= cfg.tol * max(abs(history[-1]), _EPS):
            stopped = "converged"
            break
        t, q = t + gamma * dt, q + gamma * dq
        weights = [w * (1.0 - gamma) for w in weights] + [gamma]
        classifiers.append((a, b))
        history.append(value)
    # Realise the randomised classifier: each document draws one deterministic classifier by its weight.
    rng = np.random.default_rng(cfg.seed)
    w = np.asarray(weights) / np.sum(weights)
    draw = rng.choice(len(w), size=ids.shape[0], p=w)
    chosen = np.zeros((ids.shape[0], min(batch.k, ids.shape[1])), dtype=np.int64)
    for c, (a, b) in enumerate(classifiers):
        rows = np.flatnonzero(draw == c)
        if len(rows):
            sub = _Batch(ids[rows], batch.eta[rows], batch.valid[rows], batch.label_ids, batch.k)
            chosen[rows] = sub.top_k(a[sub.ids] * sub.eta + b[sub.ids])
    return chosen, history, steps, stopped


def optimize(
    candidate_ids: np.ndarray, eta: np.ndarray, k: int, n_labels: int, config: OptimizeConfig | None = None
) -> OptimizeResult:
    """Choose k labels per document from its shortlist so that the batch's Ψ is (approximately) maximal."""
    cfg = config or OptimizeConfig()
    start = time.perf_counter()
    batch = _prepare(candidate_ids, eta, k, n_labels)
    n = batch.ids.shape[0]
    # p̃_j = Σ_i η_ij (eq. 4.15), with a zero padding slot at index u
    p = np.bincount(batch.ids[batch.valid], weights=batch.eta[batch.valid], minlength=batch.u + 1)
    obj = _Objective(cfg.metric, cfg.alpha, p, max(n, 1), n_labels, k)
    if n == 0:
        chosen, history, steps, stopped = np.zeros((0, min(k, batch.ids.shape[1])), np.int64), [0.0], 0, "empty"
    elif cfg.method == "bca":
        chosen, history, steps, stopped = _bca(batch, obj, cfg, start)
    elif cfg.method == "fw":
        chosen, history, steps, stopped = _fw(batch, obj, cfg, start)
    else:
        raise XtagError(f"unknown method {cfg.method!r}; use one of {', '.join(METHODS)}")
    t, q = batch.counts(chosen)
    labels, scores = _output(batch, chosen, n, k)
    u = batch.u
    return OptimizeResult(
        labels=labels,
        scores=scores,
        objective_start=history[0],
        objective=obj.value(t, q),
        steps=steps,
        seconds=time.perf_counter() - start,
        stopped=stopped,
        label_ids=batch.label_ids,
        tp=t[:u],
        predicted=q[:u],
        positives=p[:u],
        history=history,
    )


def optimize_predictions(
    candidate_ids: np.ndarray,
    eta: np.ndarray,
    k: int,
    n_labels: int,
    metric: Metric = "macro-f1",
    alpha: float = 1.0,
    method: Method = "bca",
    max_seconds: float = DEFAULT_MAX_SECONDS,
    seed: int = 0,
) -> np.ndarray:
    """n × k label ids (best η first, -1 padding) maximising (1 − α)·P@k + α·metric over the batch."""
    cfg = OptimizeConfig(metric=metric, alpha=alpha, method=method, max_seconds=max_seconds, seed=seed)
    return optimize(candidate_ids, eta, k, n_labels, cfg).labels


def serving_config(metric: Metric, alpha: float, method: Method = "bca") -> OptimizeConfig:
    """The config a request gets: the serving time cap instead of the offline one."""
    return OptimizeConfig(metric=metric, alpha=alpha, method=method, max_seconds=SERVING_MAX_SECONDS)


def predict_optimized(
    predictor: Predicts, texts: list[str], k: int, beam_size: int, n_labels: int, config: OptimizeConfig
) -> Predictions:
    """Top-k per text chosen jointly over the batch (the service's "optimize" option).

    Shortlists are widened exactly like reweighting (candidate_budget); η are the predictor's scores,
    calibrated probabilities when the bundle has a calibration. Returned scores are those η.
    At most SERVING_MAX_DOCS texts; the optimisation stops at config.max_seconds (the prediction
    itself is not counted). Use a calibrated bundle: on debtags (bench/tail_debtags.py) BCA on raw
    l3-hinge scores lost to per-document reweighting on macro-F1@5, on calibrated scores it won.
    """
    if len(texts) > SERVING_MAX_DOCS:
        raise XtagError(f"optimize takes at most {SERVING_MAX_DOCS} documents per batch, got {len(texts)}")
    k_cand, beam = candidate_budget(k, beam_size, n_labels)
    cand = predictor.predict(texts, k=k_cand, beam_size=beam)
    res = optimize(cand.labels, cand.scores, k, n_labels, config)
    return Predictions(labels=res.labels, scores=res.scores)
