"""Macro-aware re-ranking of a beam's candidates by linear gains a_j·η_j + b_j (Schultheis, thesis ch. 4).

A metric that is linear in each label's confusion matrix (PSP@k, macro-recall@k, any mix of them
with P@k) is maximised by top_k(a·η(x) + b) (eq. 4.18 / 4.21): a per-label affine transform of the
label probabilities, then a plain top-k. Here η_j is the model's score for label j (the product of
the post-processed level scores along the tree path, in (0, 1]) and b = 0 for every scheme:

- ``psp``:          w_j = 1 / p_j, p_j the Jain et al. propensity (A, B as in `jain_propensities`)
- ``power``:        w_j = n_j^-β, n_j the label's training document count (β = 0.5 by default)
- ``macro-recall``: w_j = 1 / π_j, π_j = n_j / N the label's training prior (macro-recall is Σ_j t_j/p_j)

The weights are rescaled so that a true label drawn from the training distribution has expected
weight 1 (Σ_j n_j w_j = Σ_j n_j), the weight every label gets under P@k. That makes the two ends
of the mixture commensurate, so ``alpha`` interpolates the metric itself (thesis §4.5: a linear mix of
macro-averaged metrics is again one):  a_j = (1 − α) + α·w_j;  α = 0 is the plain ranking and
α = 1 the pure scheme.

Widening: the beam search only scores labels under the nodes it kept, ranked by η, so tail labels
with a low η but a large a_j must first be among the candidates. With α > 0 we ask the beam search
for k' = min(L, max(CANDIDATE_FACTOR·k, MIN_CANDIDATES)) candidates with a beam BEAM_FACTOR times
wider than requested (or than the bundle's default), re-rank those k' by gain and keep k. With
α = 0 nothing is widened or re-ranked: the answer is exactly the plain prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np
from xtag.models.errors import XtagError
from xtag.models.inference.types import Predictions
from xtag.models.propensity import jain_propensities

Scheme = Literal["psp", "power", "macro-recall"]
SCHEMES: tuple[str, ...] = ("psp", "power", "macro-recall")
DEFAULT_BETA = 0.5
CANDIDATE_FACTOR = 5
MIN_CANDIDATES = 50
BEAM_FACTOR = 2


class Predicts(Protocol):
    """What reweighting and the macro optimizer (macro_optimal.py) need of a predictor: a Predictor's `predict`."""

    def predict(
        self,
        texts: list[str],
        k: int = 10,
        beam_size: int | None = None,
        rerank: bool = True,
        filters: Sequence | None = None,  # a label_filter.LabelFilter per text (label_filter imports this module)
    ) -> Predictions: ...


def label_weights(
    frequencies: np.ndarray, n_docs: int, scheme: str, beta: float | None = None, A: float = 0.55, B: float = 1.5
) -> np.ndarray:
    """Per-label weights w_j of a scheme, rescaled so that Σ_j n_j·w_j = Σ_j n_j (see the module docstring)."""
    n = np.maximum(np.asarray(frequencies, dtype=np.float64), 1.0)  # a label always has ≥ 1 training doc
    if n.ndim != 1 or n.size == 0:
        raise XtagError("reweighting needs a non-empty vector of label frequencies")
    if n_docs < 1:
        raise XtagError(f"reweighting needs the training document count, got {n_docs}")
    if beta is not None and scheme != "power":
        raise XtagError(f"reweight.beta only applies to the 'power' scheme, not {scheme!r}")
    if scheme == "psp":
        w = 1.0 / jain_propensities(n, max(n_docs, 3), A, B)  # log N − 1 > 0 needs N ≥ 3
    elif scheme == "power":
        b = DEFAULT_BETA if beta is None else float(beta)
        if not np.isfinite(b) or b < 0:
            raise XtagError(f"reweight.beta must be a finite number ≥ 0, got {beta}")
        w = n**-b
    elif scheme == "macro-recall":
        w = n_docs / n
    else:
        raise XtagError(f"unknown reweighting scheme {scheme!r}; use one of {', '.join(SCHEMES)}")
    return w * (n.sum() / (n * w).sum())


def gains_for(weights: np.ndarray, alpha: float) -> np.ndarray:
    """The a_j of eq. 4.21 for a mix of P@k (weight 1) and the scheme (weights w): (1 − α) + α·w."""
    if not (0.0 <= alpha <= 1.0):
        raise XtagError(f"reweight.alpha must be between 0 and 1, got {alpha}")
    return (1.0 - alpha) + alpha * np.asarray(weights, dtype=np.float64)


def candidate_budget(k: int, beam_size: int, n_labels: int) -> tuple[int, int]:
    """How many candidates (k') and which beam width the beam search needs so tail labels can surface."""
    k_cand = min(n_labels, max(CANDIDATE_FACTOR * k, MIN_CANDIDATES, k))
    return max(k_cand, 1), max(beam_size * BEAM_FACTOR, 1)


def gains_of(preds: Predictions, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """The gain a_j·η_j + b_j each candidate is ranked by (-inf for padding): what a re-ranked list is sorted by."""
    labels, scores = preds.labels, preds.scores.astype(np.float64)
    safe = np.maximum(labels, 0)
    g = a[safe] * scores + (b[safe] if b is not None else 0.0)
    return np.where((labels >= 0) & np.isfinite(scores), g, -np.inf)


def rerank(preds: Predictions, a: np.ndarray, k: int, b: np.ndarray | None = None) -> tuple[Predictions, np.ndarray]:
    """Top-k of the candidates by gain a_j·η_j + b_j; returns (labels with their model scores η, gains)."""
    labels = preds.labels
    g = gains_of(preds, a, b)
    kk = min(k, labels.shape[1])
    order = np.argsort(-g, axis=1, kind="stable")[:, :kk]
    out_l = np.take_along_axis(labels, order, 1)
    out_s = np.take_along_axis(preds.scores, order, 1)
    out_g = np.take_along_axis(g, order, 1)
    out_l = np.where(np.isfinite(out_g), out_l, -1)
    if kk < k:  # fewer candidates than k: pad like the beam search does
        pad = ((0, 0), (0, k - kk))
        out_l = np.pad(out_l, pad, constant_values=-1)
        out_s = np.pad(out_s, pad, constant_values=-np.inf)
        out_g = np.pad(out_g, pad, constant_values=-np.inf)
    return Predictions(labels=out_l, scores=out_s.astype(np.float32)), out_g


def predict_reweighted(
    predictor: Predicts,
    texts: list[str],
    k: int,
    a: np.ndarray | None,
    beam_size: int,
    n_labels: int,
    second_stage: bool = True,
    filters: Sequence | None = None,  # a label_filter.LabelFilter per text (label_filter imports this module)
) -> Predictions:
    """Predict top-k re-ranked by gains `a` (None = plain prediction, nothing widened); `second_stage=False`:
    a re-ranking bundle's first stage alone (models/inference/predictor.py); `filters`: per text, the labels it
    may get (models/inference/label_filter.py), the candidates being the allowed ones."""
    filtered = {} if filters is None else {"filters": filters}  # a predictor without filters is called as before
    if a is None:
        return predictor.predict(texts, k=k, beam_size=beam_size, rerank=second_stage, **filtered)
    k_cand, beam = candidate_budget(k, beam_size, n_labels)
    return rerank(predictor.predict(texts, k=k_cand, beam_size=beam, rerank=second_stage, **filtered), a, k)[0]
