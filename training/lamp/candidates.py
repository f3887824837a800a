"""LaMP's training candidates: the first stage's top-C per text, with the true labels it missed forced in."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from xtag.models.lamp.model import score_features


@dataclass
class Candidates:
    labels: np.ndarray  # n × C label ids of the first stage's label space, -1 = padding
    scores: np.ndarray  # n × C first-stage scores as the graph reads them (padding 0)
    y: np.ndarray  # n × C: 1.0 where the candidate is a true label
    forced: int  # true labels the first stage missed, added by teacher forcing
    positives: int  # true labels of the texts (those the first stage knows)
    missed: int  # true labels not in the first stage's top-C (forced in unless teacher forcing is off)

    @property
    def valid(self) -> np.ndarray:
        return (self.labels >= 0).astype(np.float32)


def teacher_forced(labels: np.ndarray, scores: np.ndarray, truth: list[np.ndarray], force: bool = True) -> Candidates:
    """Each row's true labels missing from its top-C replace its lowest-ranked candidates that are not true
    (padding first, being last), so the width stays C and every positive is scored; a forced label gets the
    row's lowest real score, the place it would take were the list longer. A row with more true labels than
    C keeps the first C of them. force=False keeps the top-C as the first stage gave them (lamp.teacher_forcing)."""
    labels, scores = labels.copy(), score_features(scores)
    forced = missed = 0
    for i, true in enumerate(truth):
        row = labels[i]
        missing = np.setdiff1d(true, row[row >= 0])[: len(row)]
        missed += len(missing)
        if not len(missing) or not force:
            continue
        free = np.flatnonzero(~np.isin(row, true))[::-1][: len(missing)][::-1]  # the last non-true positions
        missing = missing[: len(free)]
        real = scores[i][row >= 0]
        row[free] = missing
        scores[i, free] = real.min() if len(real) else 0.0
        forced += len(missing)
    y = np.stack([np.isin(row, true) for row, true in zip(labels, truth)]).astype(np.float32)
    y *= labels >= 0
    return Candidates(labels, scores, y, forced, int(sum(len(t) for t in truth)), missed)


def first_stage_labels(Y: sp.csr_matrix, names: list[str], first_index: dict[str, int], n_first: int):
    """Y (the run's label columns) in the first stage's label space, and the count of label occurrences dropped
    because the first stage has no such label (it could never propose them)."""
    cols = np.array([first_index.get(n, -1) for n in names], dtype=np.int64)
    coo = Y.tocoo()
    keep = cols[coo.col] >= 0
    mapped = sp.csr_matrix(
        (np.ones(int(keep.sum()), np.float32), (coo.row[keep], cols[coo.col[keep]])), shape=(Y.shape[0], n_first)
    )
    mapped.sum_duplicates()
    return mapped, int((~keep).sum())
