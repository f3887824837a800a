"""How two models' answers to the same documents compare: the figures shadow scoring exports (service/state/shadow.py).

Per document, from the two top-k lists of label names (the primary's as it answered, the shadow's for the same k):

- top-1 agreement: both ranked the same label first;
- overlap@k: the share of the k labels both returned;
- rank correlation: Kendall's tau-b of the two rankings over the labels either returned, a label missing from a
  list ranked after all of that list's (tied), so 1 is the same list in the same order and -1 the reverse.

A window keeps the last `capacity` documents (their sums kept in step, so adding is O(1)), and, for the documents
that came with an id, both lists: where the feedback store holds corrected labels for such an id, each model's
live P@k on them is the same P@k `xtag evaluate` reports (models/metrics.py), over the same documents for both.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from xtag.models.metrics import evaluate

LIVE_KS = (1, 3, 5)


def rank_correlation(a: list[str], b: list[str]) -> float:
    """Kendall's tau-b of two top-k lists over their union (a label absent from a list ranks last in it).

    Written out rather than scipy.stats.kendalltau (which gives the same value, tests/service/state/
    test_svc_shadow.py): on lists of a few labels scipy's checks cost 143 µs a call, held under the GIL on
    the shadow's thread once per compared document, which the primary's requests waited for; this costs ~15 µs.
    tau-b = Σ sign(Δa)·sign(Δb) / √(Σ|sign(Δa)| · Σ|sign(Δb)|) over the pairs of the union."""
    union = list(dict.fromkeys(a + b))
    if len(union) < 2:
        return 1.0 if a == b else 0.0
    rank_a = {name: i for i, name in enumerate(a)}
    rank_b = {name: i for i, name in enumerate(b)}
    x = np.array([rank_a.get(n, len(a)) for n in union])
    y = np.array([rank_b.get(n, len(b)) for n in union])
    sx, sy = np.sign(x[:, None] - x[None, :]), np.sign(y[:, None] - y[None, :])
    ties_free = float(np.abs(sx).sum()) * float(np.abs(sy).sum())
    if ties_free == 0:
        return 1.0  # one list ranks every label alike (no information), as scipy's nan was read
    return float((sx * sy).sum()) / math.sqrt(ties_free)


def compare(a: list[str], b: list[str], k: int) -> tuple[bool, float, float]:
    """(top-1 agreement, overlap@k, rank correlation) of two top-k lists of names."""
    top1 = bool(a) and bool(b) and a[0] == b[0]
    overlap = len(set(a[:k]) & set(b[:k])) / k if k else 0.0
    return top1, overlap, rank_correlation(a[:k], b[:k])


class AgreementWindow:
    """The last `capacity` compared documents: running means, and both answers of those with an id."""

    def __init__(self, capacity: int):
        self.rows: deque[tuple[bool, float, float]] = deque(maxlen=capacity)
        self.answers: deque[tuple[str, list[str], list[str]]] = deque(maxlen=capacity)  # (id, primary, shadow)
        self.sums = [0.0, 0.0, 0.0]
        self.compared = 0
        self._lock = threading.Lock()

    def add(self, doc_id: str | None, primary: list[str], shadow: list[str], k: int) -> tuple[bool, float, float]:
        row = compare(primary, shadow, k)
        with self._lock:
            if len(self.rows) == self.rows.maxlen:
                for i, x in enumerate(self.rows[0]):
                    self.sums[i] -= x
            self.rows.append(row)
            for i, x in enumerate(row):
                self.sums[i] += x
            self.compared += 1
            if doc_id is not None:
                self.answers.append((doc_id, primary, shadow))
        return row

    def means(self) -> dict:
        """The window's mean top-1 agreement, overlap@k and rank correlation (None while it is empty)."""
        with self._lock:
            n, sums = len(self.rows), list(self.sums)
        keys = ("top1_agreement", "overlap_at_k", "rank_correlation")
        return {"window_documents": n, **{key: (round(s / n, 6) if n else None) for key, s in zip(keys, sums)}}

    def live_precision(self, labels_for: Callable[[list[str]], dict[str, list[str]]]) -> dict:
        """Each side's P@k on the window's documents whose id has corrected labels (`labels_for`: ids → names,
        the feedback store's), the latest answer per id; k up to the shortest answer's length."""
        with self._lock:
            latest = {doc_id: (p, s) for doc_id, p, s in self.answers}
        truth = labels_for(list(latest)) if latest else {}
        ids = [i for i in latest if truth.get(i)]
        out = {"documents": len(ids), "primary": {}, "shadow": {}}
        if not ids:
            return out
        k_max = min(min(len(latest[i][0]), len(latest[i][1])) for i in ids)
        ks = tuple(k for k in LIVE_KS if k <= k_max)
        if not ks:
            return out
        column: dict[str, int] = {}  # every name either side returned or the store holds, one column each
        rows = [[column.setdefault(n, len(column)) for n in truth[i]] for i in ids]
        preds = [
            np.array([[column.setdefault(n, len(column)) for n in latest[i][side][: max(ks)]] for i in ids])
            for side in (0, 1)
        ]
        indptr = np.cumsum([0] + [len(r) for r in rows])
        Y = sp.csr_matrix((np.ones(indptr[-1]), np.concatenate(rows), indptr), shape=(len(ids), len(column)))
        for side, pred in zip(("primary", "shadow"), preds):
            scores = evaluate(pred, Y, ks)
            out[side] = {f"P@{k}": round(float(scores[f"P@{k}"]), 4) for k in ks}
        return out
