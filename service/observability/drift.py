"""Label drift: how the labels the service returns now differ from the labels it was trained on.

The reference is the training label frequencies every bundle ships (labels.json, read into LabelVocab), so no
second file is needed. The served side is a bounded window: a ring of the last `capacity` label ids returned
(k per document, reweighted answers included), with per-label counts kept in step, so adding is O(k) and
memory is fixed. Compared as distributions over labels:

- the Jensen–Shannon divergence (base 2, in [0, 1]); top-k answers never match training frequencies exactly
  (k labels per text, models favour frequent labels), so a steady level is normal and an alert should fire on
  a rise above the level measured on held-out traffic (docs/operations/observability.md), not on a fixed bound;
- the share of returned labels in the head / torso / tail bands (models/metrics.py's frequency_buckets: the
  same bands `xtag evaluate` reports);
- risers and fallers: the labels served more / less often than in training, ranked by their term of the
  divergence (each label's term is ≥ 0), so both a frequent label's small relative change and a rare label's
  large one count, and a label's rank is its weight in the score. (Ranking by the share difference put the
  generic `role::program` above `use::gameplaying` for a burst of games; by the ratio, labels seen a few
  times in training came first.)
"""

from __future__ import annotations

import threading

import numpy as np
from xtag.models.metrics import BUCKETS, frequency_buckets

DEFAULT_WINDOW = 50_000  # label occurrences (5,000 documents at k = 10)


def js_terms(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Each coordinate's term of the Jensen–Shannon divergence (base 2) of p and q; they sum to it."""
    m = (p + q) / 2

    def kl(a: np.ndarray) -> np.ndarray:
        out = np.zeros_like(a)
        used = a > 0
        out[used] = a[used] * np.log2(a[used] / m[used])
        return out

    return np.maximum((kl(p) + kl(q)) / 2, 0.0)


def jensen_shannon(p: np.ndarray, q: np.ndarray) -> float:
    """JS divergence of two distributions (each summing to 1), base 2: 0 for equal ones, 1 for disjoint ones."""
    return float(js_terms(p, q).sum())


class LabelDrift:
    """Served label counts over a bounded window, against the training label distribution."""

    def __init__(self, train_frequencies: np.ndarray, capacity: int = DEFAULT_WINDOW):
        f = np.asarray(train_frequencies, dtype=np.float64)
        self.train = f / f.sum() if f.sum() > 0 else np.full(len(f), 1 / max(len(f), 1))
        self.band = frequency_buckets(f)
        # Python lists, not numpy: a predictor call adds k labels, and numpy's per-element updates (np.add.at)
        # cost ~30 µs a call where plain lists take a few
        self.ring = [-1] * capacity
        self.counts = [0] * len(f)
        self.next = 0
        self.documents = 0
        self._lock = threading.Lock()  # predictor calls may run on several threads

    def add(self, labels: np.ndarray, documents: int) -> None:
        """Record the label ids returned for `documents` texts (padding, -1, already dropped)."""
        ids = np.asarray(labels).ravel().tolist()[-len(self.ring) :]
        ring, counts, capacity = self.ring, self.counts, len(self.ring)
        with self._lock:
            self.documents += documents
            at = self.next
            for j in ids:
                old = ring[at]
                if old >= 0:
                    counts[old] -= 1
                ring[at] = j
                counts[j] += 1
                at = at + 1 if at + 1 < capacity else 0
            self.next = at

    def summary(self, names: list[str], top: int = 10) -> dict:
        """Divergence, band shares and top risers/fallers over the window (None figures while it is empty)."""
        with self._lock:
            counts = np.array(self.counts, dtype=np.int64)
            documents = self.documents
        total = int(counts.sum())
        out = {
            "window_labels": total,
            "window_capacity": len(self.ring),
            "documents": documents,
            "js_divergence": None,
            "bands": {
                b: {"served": None, "train": round(float(self.train[self.band == i].sum()), 6)}
                for i, b in enumerate(BUCKETS)
            },
            "risers": [],
            "fallers": [],
        }
        if total == 0:
            return out
        served = counts / total
        terms = js_terms(served, self.train)
        out["js_divergence"] = round(float(terms.sum()), 6)
        for i, b in enumerate(BUCKETS):
            out["bands"][b]["served"] = round(float(served[self.band == i].sum()), 6)
        if top <= 0:  # /metrics wants the figures only: no sort over every label
            return out
        order = np.argsort(-terms, kind="stable")

        def row(j: int) -> dict:
            return {
                "name": names[j],
                "served_share": round(float(served[j]), 6),
                "train_share": round(float(self.train[j]), 6),
                "band": BUCKETS[self.band[j]],
                "divergence_term": round(float(terms[j]), 6),
            }

        out["risers"] = [row(j) for j in order[served[order] > self.train[order]][:top]]
        out["fallers"] = [row(j) for j in order[served[order] < self.train[order]][:top]]
        return out
