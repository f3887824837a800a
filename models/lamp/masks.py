"""LaMP_pr's label graph: which candidate pairs may pass messages (label pairs seen together in training).

Kept as sorted pair codes i·L + j (both directions) rather than a dense L × L matrix, so it costs memory in
the number of co-occurring pairs, not L² (36K labels would need 1.3 GB dense). The same code builds the
mask for training and for serving.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def cooccurrence_codes(Y: sp.csr_matrix) -> np.ndarray:
    """Sorted codes i·L + j of every ordered pair of distinct labels that share a training document."""
    B = (Y != 0).astype(np.int32).tocsc()
    pairs = (B.T @ B).tocoo()
    keep = pairs.row != pairs.col
    n = np.int64(Y.shape[1])
    return np.unique(pairs.row[keep].astype(np.int64) * n + pairs.col[keep].astype(np.int64))


def label_mask(candidates: np.ndarray, valid: np.ndarray, codes: np.ndarray | None, n_labels: int) -> np.ndarray:
    """n × C × C float32: 1 where candidate i may attend to candidate j.

    Every node attends to itself; otherwise j must be a real candidate and, with `codes` (LaMP_pr), the pair
    must co-occur in training; without codes (LaMP_fc) all real candidates are neighbours. No row is empty, so
    no softmax is taken over nothing; padded candidates' rows are computed and ignored.
    """
    n, c = candidates.shape
    ok = np.broadcast_to(valid[:, None, :] > 0, (n, c, c)).copy()
    if codes is not None:
        pair = candidates[:, :, None].astype(np.int64) * np.int64(n_labels) + candidates[:, None, :]
        at = np.minimum(np.searchsorted(codes, pair), max(len(codes) - 1, 0))
        ok &= codes[at] == pair if len(codes) else False
    ok[:, np.arange(c), np.arange(c)] = True
    return ok.astype(np.float32)
