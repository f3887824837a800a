"""Balanced spherical 2-means of a range of labels, compiled: the label tree's inner loop.

The tree splits every node into its B children the way PECOS's hierarchical k-means does, by
recursive bisection (training/tree/build.py): 2-means, then 2-means of each half, and so on. A
bisection's balanced assignment is exact and optimal (sort by the difference of the two
similarities, cut at the capacity), where a direct B-way split under capacities needs a
heuristic; and it is cheaper: 16 children cost 4 passes of 2 similarities per nonzero instead of
16, with two centroids that stay in cache.

Written with Numba: the scipy/sklearn version spent most of its time in per-call checks and
copies and held one core. The kernel releases the GIL, so the bisections of one round run in
threads, each with its own zeroed scratch (the two centroids' sums, their normalised difference and a
column marker, over all features).
"""

from __future__ import annotations

import numpy as np
from xtag.models.engine.jit import njit
from xtag.training.tree.node_kernels import rand_below


@njit()
def _columns_of(indptr, indices, rows, marker):
    """The distinct columns `rows` use; `marker` is all False on entry and on exit."""
    n = 0
    for r in rows:
        for j in range(indptr[r], indptr[r + 1]):
            if not marker[indices[j]]:
                marker[indices[j]] = True
                n += 1
    touched = np.empty(n, np.int64)
    n = 0
    for r in rows:
        for j in range(indptr[r], indptr[r + 1]):
            if marker[indices[j]]:
                marker[indices[j]] = False
                touched[n] = indices[j]
                n += 1
    return touched


@njit()
def bisect(indptr, indices, data, rows, left, iters, state, S, D, marker):
    """Reorder `rows` (unit-length rows of a CSR matrix) so that its first `left` form one cluster.

    Spherical 2-means from two random rows; each iteration ranks rows by the difference of their
    similarities to the two centroids and cuts at `left`, until the cut stops changing or after
    `iters` iterations. The centroids' sums S (features × 2, float64) are kept up to date by moving
    only the rows that changed side, so after the first iterations an iteration costs one pass of
    gathers from the normalised difference D (features, float32). S, D and `marker` are zero on entry
    and on exit.
    """
    m = len(rows)
    touched = _columns_of(indptr, indices, rows, marker)
    a = rand_below(state, m)
    b = rand_below(state, m - 1)
    b += b >= a
    for j in range(indptr[rows[a]], indptr[rows[a] + 1]):
        S[indices[j], 0] = data[j]
    for j in range(indptr[rows[b]], indptr[rows[b] + 1]):
        S[indices[j], 1] = data[j]
    diff = np.empty(m, np.float64)
    order = np.arange(m)
    in_left = np.zeros(m, np.bool_)
    was_left = np.zeros(m, np.bool_)
    for it in range(iters):
        n0 = n1 = 0.0
        for c in touched:
            n0 += S[c, 0] * S[c, 0]
            n1 += S[c, 1] * S[c, 1]
        n0 = 1.0 / np.sqrt(n0) if n0 > 0 else 0.0
        n1 = 1.0 / np.sqrt(n1) if n1 > 0 else 0.0
        for c in touched:
            D[c] = S[c, 0] * n0 - S[c, 1] * n1
        for k in range(m):
            r, s = rows[k], 0.0
            for j in range(indptr[r], indptr[r + 1]):
                s += data[j] * D[indices[j]]
            diff[k] = s
        order = np.argsort(-diff, kind="mergesort")  # ties keep the rows' order
        was_left[:] = in_left
        changed = it == 0
        for rank in range(m):
            now = rank < left
            changed |= in_left[order[rank]] != now
            in_left[order[rank]] = now
        if not changed:
            break
        if it == 0:  # from the seeds to the sums of each side
            for c in touched:
                S[c, 0] = S[c, 1] = 0.0
            for k in range(m):
                side, r = 0 if in_left[k] else 1, rows[k]
                for j in range(indptr[r], indptr[r + 1]):
                    S[indices[j], side] += data[j]
            continue
        for k in range(m):  # the rows that changed side move their contribution
            if in_left[k] != was_left[k]:
                to, r = 0 if in_left[k] else 1, rows[k]
                for j in range(indptr[r], indptr[r + 1]):
                    S[indices[j], to] += data[j]
                    S[indices[j], 1 - to] -= data[j]
    for c in touched:
        S[c, 0] = S[c, 1] = 0.0
        D[c] = 0.0
    rows[:] = rows[order]


def left_size(n, parts):
    """Rows the left half of a bisection keeps when n rows end in `parts` balanced clusters (parts // 2 on the left);
    integers or arrays of them (0 where parts is 1: nothing to split)."""
    half = parts // 2
    return (n // np.maximum(parts, 1)) * half + np.minimum(n % np.maximum(parts, 1), half)
