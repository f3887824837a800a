"""Ranking metrics for top-k predictions, used by evaluation, benchmarks and the service alike.

All metrics take predictions as an n × k array of label ids, best first, -1 for "no label", and
the ground truth as a binary n × m' sparse matrix. Results are percentages.

Conventions (CONVENTIONS; `xtag evaluate --convention`), so that figures compare with published ones:

- ``xmc`` (default; the pyxclib / Extreme Classification Repository practice): every test label
  mention counts. The ground truth has one column per model label *plus* one per test label unseen
  in training (corpus/files.py: `Corpus.label_matrix(vocab, extra=...)`); such a label can never be
  predicted, so it is a miss, but it counts in the denominators of recall, of nDCG's ideal DCG and
  of PSP's normaliser. Macro-P/R/F1@k and coverage@k are averaged over the labels that occur in the
  test split (a label with no test document has no recall to average).
- ``known-labels`` (xtag before issue 14): test labels unknown to the model are dropped from the
  ground truth, and the macro metrics and coverage are averaged over all model labels.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import scipy.sparse as sp
from xtag.models.errors import XtagError
from xtag.models.propensity import jain_propensities  # the one implementation; re-exported here

Convention = Literal["xmc", "known-labels"]
DEFAULT_CONVENTION: Convention = "xmc"
CONVENTIONS: dict[str, str] = {
    "xmc": "XMC convention (pyxclib-style): every test label mention counts, labels unseen in training are "
    "misses; PSP normalised over all test labels; macro-P/R/F1 and coverage averaged over the test split's labels",
    "known-labels": "known-labels convention: test labels unseen in training dropped; macro-P/R/F1 and coverage "
    "averaged over all model labels",
}


def check_convention(convention: str) -> Convention:
    if convention not in CONVENTIONS:
        raise XtagError(f"unknown evaluation convention {convention!r}; use one of {', '.join(CONVENTIONS)}")
    return convention  # type: ignore[return-value]


def averaged_labels(Y: sp.csr_matrix, convention: str = DEFAULT_CONVENTION) -> np.ndarray:
    """Boolean mask of the labels (columns) that macro averages and coverage run over under `convention`."""
    if check_convention(convention) == "known-labels":
        return np.ones(Y.shape[1], dtype=bool)
    return np.asarray(Y.sum(axis=0)).ravel() > 0


def propensities_with_unseen(
    frequencies: np.ndarray, n_unseen: int, n_docs: int, A: float = 0.55, B: float = 1.5
) -> np.ndarray:
    """Propensities of the model's labels followed by `n_unseen` test labels never seen in training.

    An unseen label has training frequency N_l = 0 and gets the formula's value at 0 — the largest
    inverse propensity, 1 + C·B^-A. That is what pyxclib's `compute_inv_propesity` gives when run on
    the *training* label matrix over the joint label space (an unseen label's column is empty); we
    never estimate propensities from test counts, which would leak the test split into the metric.
    """
    freq = np.concatenate([np.asarray(frequencies, dtype=np.float64), np.zeros(int(n_unseen))])
    return jain_propensities(freq, n_docs, A, B)


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


def _macro(pred: np.ndarray, hits: np.ndarray, Y: sp.csr_matrix, k: int, over: np.ndarray) -> dict[str, float]:
    """Macro-averaged over the labels in `over` (thesis eq. 4.8): per-label confusion counts, 0/0 := 0."""
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
    if not over.any():
        return {f"{name}@{k}": 0.0 for name in ("macro-P", "macro-R", "macro-F1", "coverage")}
    return {
        f"macro-P@{k}": 100 * prec[over].mean(),
        f"macro-R@{k}": 100 * rec[over].mean(),
        f"macro-F1@{k}": 100 * f1[over].mean(),
        f"coverage@{k}": 100 * (tp[over] > 0).mean(),
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
    convention: str = DEFAULT_CONVENTION,
) -> dict[str, float]:
    """P@k, nDCG@k, recall@k, macro-P/R/F1@k, coverage@k, and PSP@k/PSnDCG@k when propensities are given.

    PSP@k and PSnDCG@k are normalised by the best attainable value on the same documents (the
    convention of the XMC repository tools): 100 means every top-k slot held the rarest true labels.
    `propensity` has one entry per column of Y (`propensities_with_unseen` for unseen-label columns);
    `convention` picks the labels the macro metrics average over (module docstring).
    """
    kmax = max(ks)
    _check(pred, Y, kmax)
    pred = pred[:, :kmax]
    Y = Y.tocsr()
    n = Y.shape[0]
    hits = _hits(pred, Y)
    over = averaged_labels(Y, convention)
    n_true = np.diff(Y.indptr)
    discount = 1.0 / np.log2(np.arange(2, kmax + 2))
    out: dict[str, float] = {}
    if propensity is not None:
        inv_p = 1.0 / np.asarray(propensity, dtype=np.float64)
        if inv_p.shape != (Y.shape[1],):
            raise XtagError(f"{inv_p.size} propensities for {Y.shape[1]} label columns")
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
        out.update(_macro(pred, hits, Y, k, over))
    return out


def occurrence_recall(pred: np.ndarray, Y: sp.csr_matrix, columns: np.ndarray, k: int) -> float:
    """Percent of the true (document, label) pairs of the labels `columns` that appear in that document's top k,
    counted against every label: the test-only labels' recall@k (issue 49), where micro R@k would be dominated by
    the head and macro R@k by labels that are easy to name."""
    Y = Y.tocsr()
    wanted = np.zeros(Y.shape[1], dtype=bool)
    wanted[np.asarray(columns, dtype=np.int64)] = True
    hits = _hits(pred[:, :k], Y)
    found = np.where(hits, wanted[np.maximum(pred[:, :k], 0)], False).sum()
    total = int(wanted[Y.indices].sum())
    return 100.0 * found / total if total else 0.0


def set_metrics(
    pred: np.ndarray, scores: np.ndarray, Y: sp.csr_matrix, threshold: float, convention: str = DEFAULT_CONVENTION
) -> dict[str, float]:
    """The set metrics of multi-label classification (LaMP's paper, section 8.2): each document's predicted
    set is its top-k labels scoring at least `threshold`; example-based F1 (mean over documents, 0/0 := 0),
    micro-F1 (pooled counts) and macro-F1 (mean over the labels `convention` averages over), percent."""
    Y = Y.tocsr()
    keep = (pred >= 0) & (scores >= threshold)
    hits = _hits(pred, Y) & keep
    tp, n_pred, n_true = hits.sum(axis=1), keep.sum(axis=1), np.diff(Y.indptr)
    example = np.where(n_pred + n_true > 0, 2 * tp / np.maximum(n_pred + n_true, 1), 0.0)
    micro = 2 * tp.sum() / max(int(n_pred.sum() + n_true.sum()), 1)
    label_tp = np.bincount(pred[hits], minlength=Y.shape[1])
    label_pred = np.bincount(pred[keep], minlength=Y.shape[1])
    label_true = np.bincount(Y.indices, minlength=Y.shape[1])
    denom = label_pred + label_true
    f1 = np.where(denom > 0, 2 * label_tp / np.maximum(denom, 1), 0.0)
    over = averaged_labels(Y, convention)
    return {
        "example-F1": 100 * float(example.mean()),
        "micro-F1": 100 * float(micro),
        "macro-F1": 100 * float(f1[over].mean()) if over.any() else 0.0,
    }


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


def bucket_metrics(
    pred: np.ndarray,
    Y: sp.csr_matrix,
    k: int,
    buckets: np.ndarray,
    convention: str = DEFAULT_CONVENTION,
    names: tuple[str, ...] = BUCKETS,
) -> dict[str, dict[str, float]]:
    """Per bucket: label count, support, predicted, tp, micro P/R (pooled counts) and macro-P/R/F1, percent.

    The macro columns average over the bucket's labels that `evaluate` averages over (`averaged_labels`:
    under the xmc convention those with test support, counted in `averaged`), so the buckets'
    `averaged`-weighted macro values add up to the overall ones.
    """
    c = per_label_metrics(pred, Y, k)
    over = averaged_labels(Y, convention)
    out: dict[str, dict[str, float]] = {}
    for b, name in enumerate(names):  # any grouping of labels: frequency buckets, or old/new labels of an update
        sel = np.asarray(buckets) == b
        s, q, t = (float(c[key][sel].sum()) for key in ("support", "predicted", "tp"))
        avg = sel & over
        mean = (lambda a: 100 * float(a[avg].mean())) if avg.any() else (lambda a: 0.0)
        out[name] = {
            "labels": int(sel.sum()),
            "averaged": int(avg.sum()),
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
