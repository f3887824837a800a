"""Ranking metrics for top-k predictions, used by evaluation, benchmarks and the service alike.

All metrics take predictions as an n × k array of label ids, best first, -1 for "no label", and
the ground truth as a binary n × m sparse matrix. Results are percentages.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from models.errors import XtagError


def jain_propensities(frequencies: np.ndarray, n_docs: int, A: float = 0.55, B: float = 1.5) -> np.ndarray:
    """Jain et al. (2016): p_l = 1 / (1 + C·exp(-A·log(N_l + B))), C = (log N − 1)·(B + 1)^A."""
    C = (np.log(n_docs) - 1.0) * (B + 1.0) ** A
    return 1.0 / (1.0 + C * np.exp(-A * np.log(np.asarray(frequencies, dtype=np.float64) + B)))


def _hits(pred: np.ndarray, Y: sp.csr_matrix) -> np.ndarray:
    """n × k boolean: is the label at rank r of document i relevant."""
    n, k = pred.shape
    Y = Y.tocsr()
    hits = np.zeros((n, k), dtype=bool)
    for i in range(n):  # rows are tiny (a few labels), so a set lookup per row is cheapest
        true = Y.indices[Y.indptr[i] : Y.indptr[i + 1]]
        if len(true):
            hits[i] = np.isin(pred[i], true) & (pred[i] >= 0)
    return hits


def _check(pred: np.ndarray, Y: sp.csr_matrix, k: int) -> None:
    if pred.ndim != 2 or pred.shape[0] != Y.shape[0]:
        raise XtagError(f"predictions have shape {pred.shape} for {Y.shape[0]} documents")
    if pred.shape[1] < k:
        raise XtagError(f"metrics @{k} need at least {k} predictions per document, got {pred.shape[1]}")


def _macro(pred: np.ndarray, hits: np.ndarray, Y: sp.csr_matrix, k: int) -> dict[str, float]:
    """Macro-averaged over all m labels (thesis eq. 4.8): per-label confusion counts, 0/0 := 0."""
    m = Y.shape[1]
    top, hit = pred[:, :k], hits[:, :k]
    valid = top >= 0
    predicted = np.bincount(top[valid], minlength=m).astype(np.float64)
    tp = np.bincount(top[valid & hit], minlength=m).astype(np.float64)
    support = np.asarray(Y.sum(axis=0)).ravel().astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        prec = np.where(predicted > 0, tp / predicted, 0.0)
        rec = np.where(support > 0, tp / support, 0.0)
        f1 = np.where(predicted + support > 0, 2 * tp / (predicted + support), 0.0)
    return {
        f"macro-P@{k}": 100 * prec.mean(),
        f"macro-R@{k}": 100 * rec.mean(),
        f"macro-F1@{k}": 100 * f1.mean(),
        f"coverage@{k}": 100 * (tp > 0).mean(),
    }


def per_label_counts(pred: np.ndarray, Y: sp.csr_matrix, k: int) -> dict[str, np.ndarray]:
    """Per-label support, predicted and true-positive counts at k (for per-label reports)."""
    _check(pred, Y, k)
    hits = _hits(pred[:, :k], Y)
    m, top = Y.shape[1], pred[:, :k]
    valid = top >= 0
    return {
        "support": np.asarray(Y.sum(axis=0)).ravel().astype(np.int64),
        "predicted": np.bincount(top[valid], minlength=m),
        "tp": np.bincount(top[valid & hits], minlength=m),
    }


def evaluate(
    pred: np.ndarray,
    Y: sp.csr_matrix,
    ks: tuple[int, ...] = (1, 3, 5),
    propensity: np.ndarray | None = None,
) -> dict[str, float]:
    """P@k, nDCG@k, recall@k, macro-P/R/F1@k, coverage@k, and PSP@k/PSnDCG@k when propensities are given.

    PSP@k and PSnDCG@k are normalised by the best attainable value on the same documents (the
    convention of the XMC repository tools): 100 means every top-k slot held the rarest true labels.
    """
    kmax = max(ks)
    _check(pred, Y, kmax)
    pred = pred[:, :kmax]
    Y = Y.tocsr()
    n = Y.shape[0]
    hits = _hits(pred, Y)
    n_true = np.diff(Y.indptr)
    discount = 1.0 / np.log2(np.arange(2, kmax + 2))
    out: dict[str, float] = {}
    if propensity is not None:
        inv_p = 1.0 / np.asarray(propensity, dtype=np.float64)
        gain = np.where(hits, inv_p[np.maximum(pred, 0)], 0.0)
        # Ideal: each document's true labels sorted by 1/p, best first.
        ideal = np.zeros((n, kmax))
        for i in range(n):
            w = np.sort(inv_p[Y.indices[Y.indptr[i] : Y.indptr[i + 1]]])[::-1][:kmax]
            ideal[i, : len(w)] = w
    for k in ks:
        h = hits[:, :k]
        out[f"P@{k}"] = 100 * h.sum() / (n * k)
        idcg = np.cumsum(discount)[np.minimum(n_true, k) - 1]
        dcg = (h * discount[:k]).sum(axis=1)
        out[f"nDCG@{k}"] = 100 * np.mean(np.where(n_true > 0, dcg / np.where(n_true > 0, idcg, 1), 0.0))
        has = n_true > 0
        out[f"R@{k}"] = 100 * np.mean(h.sum(axis=1)[has] / n_true[has]) if has.any() else 0.0
        if propensity is not None:
            best = ideal[:, :k].sum()
            out[f"PSP@{k}"] = 100 * gain[:, :k].sum() / best if best else 0.0
            best_dcg = (ideal[:, :k] * discount[:k]).sum()
            out[f"PSnDCG@{k}"] = 100 * (gain[:, :k] * discount[:k]).sum() / best_dcg if best_dcg else 0.0
        out.update(_macro(pred, hits, Y, k))
    return out


# --- Per-label and per-frequency-bucket views (evaluation reports) ---

BUCKETS: tuple[str, ...] = ("head", "torso", "tail")
HEAD_MASS = 0.5  # head: the most frequent labels, together the first 50 % of training label occurrences
TORSO_MASS = 0.8  # torso: the next 30 %; tail: the labels of the last 20 % (and labels never seen in training)


def relevance(pred: np.ndarray, Y: sp.csr_matrix) -> np.ndarray:
    """n × k boolean: is the predicted label at rank r of document i relevant (-1 padding never is)."""
    if pred.ndim != 2 or pred.shape[0] != Y.shape[0]:
        raise XtagError(f"predictions have shape {pred.shape} for {Y.shape[0]} documents")
    return _hits(pred, Y)


def frequency_buckets(
    frequencies: np.ndarray, head_mass: float = HEAD_MASS, torso_mass: float = TORSO_MASS
) -> np.ndarray:
    """Bucket per label (0 head, 1 torso, 2 tail) by training frequency, with cut-offs on cumulative mass.

    Labels are sorted most frequent first; a label belongs to the bucket in which its share of the
    training label occurrences *starts*, so the most frequent label is always head. Mass cut-offs
    (not fixed counts) keep the definition independent of corpus size.
    """
    f = np.asarray(frequencies, dtype=np.float64)
    if not 0 < head_mass <= torso_mass <= 1:
        raise XtagError(f"bucket cut-offs must satisfy 0 < head ≤ torso ≤ 1, got {head_mass}, {torso_mass}")
    total = f.sum()
    out = np.full(f.shape, 2, dtype=np.int64)
    if total <= 0:
        return out
    order = np.argsort(-f, kind="stable")
    before = (np.cumsum(f[order]) - f[order]) / total
    seen = f[order] > 0
    out[order] = np.where(seen & (before < head_mass), 0, np.where(seen & (before < torso_mass), 1, 2))
    return out


def per_label_metrics(pred: np.ndarray, Y: sp.csr_matrix, k: int) -> dict[str, np.ndarray]:
    """per_label_counts plus each label's precision, recall and F1 at k (fractions; 0/0 := 0, as the macro metrics)."""
    c = per_label_counts(pred, Y, k)
    s, q, t = (c[key].astype(np.float64) for key in ("support", "predicted", "tp"))
    with np.errstate(divide="ignore", invalid="ignore"):
        c["precision"] = np.where(q > 0, t / q, 0.0)
        c["recall"] = np.where(s > 0, t / s, 0.0)
        c["f1"] = np.where(s + q > 0, 2 * t / (s + q), 0.0)
    return c


def bucket_metrics(pred: np.ndarray, Y: sp.csr_matrix, k: int, buckets: np.ndarray) -> dict[str, dict[str, float]]:
    """Per bucket: label count, support, predicted, tp, micro P/R (pooled counts) and macro-P/R/F1 (mean over its labels), percent."""
    c = per_label_metrics(pred, Y, k)
    out: dict[str, dict[str, float]] = {}
    for b, name in enumerate(BUCKETS):
        sel = np.asarray(buckets) == b
        s, q, t = (float(c[key][sel].sum()) for key in ("support", "predicted", "tp"))
        mean = (lambda a: 100 * float(a[sel].mean())) if sel.any() else (lambda a: 0.0)
        out[name] = {
            "labels": int(sel.sum()),
            "support": s,
            "predicted": q,
            "tp": t,
            f"micro-P@{k}": 100 * t / q if q else 0.0,
            f"micro-R@{k}": 100 * t / s if s else 0.0,
            f"macro-P@{k}": mean(c["precision"]),
            f"macro-R@{k}": mean(c["recall"]),
            f"macro-F1@{k}": mean(c["f1"]),
        }
    return out
