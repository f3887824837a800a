"""Compiled helpers the label tree shares with the XR-Linear trainer: per-node random streams and row slices of X.

Both bisect or train one node at a time over the rows its parent sees, and both must give the same
result whatever thread runs the node: each node draws from its own generator seeded from (seed, node),
and reads its parent's rows of X as one compact CSR slice.
"""

from __future__ import annotations

import numpy as np
from xtag.models.engine.jit import njit

_GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_XORSHIFT_MUL = np.uint64(0x2545F4914F6CDD1D)


@njit()
def node_state(seed: int, node: int) -> np.ndarray:
    """splitmix64 of (seed, node): the xorshift64* state of one node's shuffles."""
    z = np.uint64(seed) * _GOLDEN + np.uint64(node) + np.uint64(1)
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    state = np.empty(1, np.uint64)
    state[0] = z if z != np.uint64(0) else np.uint64(1)
    return state


@njit(inline="always")
def rand_below(state: np.ndarray, n: int) -> int:
    x = state[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    state[0] = x
    return np.int64((x * _XORSHIFT_MUL) % np.uint64(n))


@njit()
def build_slice(indptr, indices, data, rows, d):
    """The parent's rows of X as CSR over the columns they use: (indptr, local indices, data, ‖x_i‖², cols).

    Local column ids go by descending frequency among the rows (`cols[local]` is the global id),
    so the weights of the features most rows share sit together in a few cache lines of w; the
    entries of each row keep their order, so the solver's arithmetic is the same in any numbering.
    """
    n = len(rows)
    count = np.zeros(d, np.int32)
    nnz = 0
    for k in range(n):
        r = rows[k]
        nnz += indptr[r + 1] - indptr[r]
        for j in range(indptr[r], indptr[r + 1]):
            count[indices[j]] += 1
    used = np.flatnonzero(count).astype(np.int32)
    cols = used[np.argsort(-count[used], kind="mergesort")]  # ties in global order
    marker = count  # reused: global id -> local id
    for m in range(len(cols)):
        marker[cols[m]] = m
    s_indptr = np.empty(n + 1, np.int64)
    s_indices = np.empty(nnz, np.int32)
    s_data = np.empty(nnz, data.dtype)
    sqnorm = np.zeros(n, np.float64)
    s_indptr[0] = 0
    pos = 0
    for k in range(n):
        r = rows[k]
        for j in range(indptr[r], indptr[r + 1]):
            s_indices[pos] = marker[indices[j]]
            s_data[pos] = data[j]
            sqnorm[k] += np.float64(data[j]) * data[j]
            pos += 1
        s_indptr[k + 1] = pos
    return s_indptr, s_indices, s_data, sqnorm, cols
