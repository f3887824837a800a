"""Ragged per-text candidate lists as padded arrays: the one layout the three transformer families train on."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def csr_row(M: sp.csr_matrix, i: int) -> np.ndarray:
    """Column ids of row i of a CSR matrix (a text's shortlist, positives or clusters)."""
    return M.indices[M.indptr[i] : M.indptr[i + 1]]


def pad_rows(rows: list[np.ndarray], positives: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, valid, y), each len(rows) × the longest row (at least 1): row i's candidate ids padded with id 0,
    1.0 where a candidate is real, and 1.0 where it is one of `positives[i]`."""
    width = max(max((len(r) for r in rows), default=1), 1)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    valid = np.zeros((len(rows), width), dtype=np.float32)
    y = np.zeros((len(rows), width), dtype=np.float32)
    for i, (r, pos) in enumerate(zip(rows, positives)):
        ids[i, : len(r)], valid[i, : len(r)] = r, 1.0
        y[i, : len(r)] = np.isin(r, pos)
    return ids, valid, y
