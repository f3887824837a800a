"""Compiled one-vs-all ranker training: liblinear's dual coordinate descent in Numba.

Per node, the binary problem min_w ½‖w‖² + Σ_i C_i ℓ(y_i wᵀx_i) with C_i = C × sample weight and
x_i extended by a constant feature 1 whose weight (the bias) is regularised, as liblinear and
scikit-learn (intercept_scaling=1) do:
- squared hinge ℓ(m) = max(0, 1 - m)²: liblinear's solver 1 (L2R_L2LOSS_SVC_DUAL, Hsieh et al.
  2008, Algorithm 3: with shrinking), stopped when the projected-gradient spread is ≤ `tol`;
- logistic ℓ(m) = log(1 + e^-m): liblinear's solver 7 (L2R_LR_DUAL, Yu, Huang & Lin 2011, dual
  coordinate descent with a Newton inner solve per coordinate), stopped when the largest dual
  gradient is below `tol`; the dual keeps the same per-document loop and the same data layout.

The documents' visiting order is shuffled every epoch from a per-node seed, with a generator local
to the call: a node's weights depend only on its data, its id and the seed, never on the thread
that trains it. Kernels release the GIL, so threads train nodes side by side over one shared
parent slice of X (training/xlinear/nodes.py).

Measured and not kept (2-core VM, bench figures in the change's report): w in float32 as PECOS
keeps it for float32 features (about 5% faster, not worth leaving liblinear's arithmetic); solving
blocks of 8-16 sibling nodes in one pass over each document (0.6× to 1.4× this loop's time,
depending on how much of the shared L3 cache other tenants used: not robust).
"""

from __future__ import annotations

import numpy as np
from xtag.models.engine.jit import njit
from xtag.training.tree.node_kernels import rand_below

SQUARED_HINGE, LOGISTIC = 0, 1


@njit()
def _shuffle(index: np.ndarray, n: int, state: np.ndarray) -> None:
    for i in range(n):  # liblinear's shuffle: swap i with a uniform pick from [i, n)
        j = i + rand_below(state, n - i)
        index[i], index[j] = index[j], index[i]


# The two loops below take nearly all of training's time. Their positions are cast to unsigned types
# because Numba wraps negative indices around (as Python does) with a sign test per signed index:
# three extra integer operations per gathered weight, which made these loops 1.5x slower (measured on
# debtags' leaf level: 0.61-0.68x the time without them, same arithmetic, bit-identical weights).


@njit(inline="always")
def _dot(w, bias_at, indptr, indices, data, i):
    s = w[bias_at]
    for j in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
        s += w[np.uint32(indices[j])] * data[j]
    return s


@njit(inline="always")
def _axpy(w, bias_at, indptr, indices, data, i, a):
    w[bias_at] += a
    for j in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
        w[np.uint32(indices[j])] += a * data[j]


@njit()
def _l2svc_dual(indptr, indices, data, sqnorm, y, Ci, eps, max_iter, state, w):
    """liblinear solve_l2r_l1l2_svc for the squared hinge (upper bound ∞, diag ½/C_i), with shrinking."""
    n, bias_at = len(y), len(w) - 1
    alpha, diag, QD = np.zeros(n), np.zeros(n), np.zeros(n)
    index = np.empty(n, np.int64)
    l = 0
    for i in range(n):
        if Ci[i] > 0:  # a zero-weight sample has α = 0 for good
            diag[i] = 0.5 / Ci[i]
            QD[i] = diag[i] + sqnorm[i] + 1.0
            index[l] = i
            l += 1
    active = l
    pg_max_old = np.inf  # (no upper bound on α for the squared hinge: liblinear's PGmin_old is unused)
    it = 0
    while it < max_iter:
        pg_max, pg_min = -np.inf, np.inf
        _shuffle(index, active, state)
        s = 0
        while s < active:
            i = index[s]
            G = y[i] * _dot(w, bias_at, indptr, indices, data, i) - 1.0 + alpha[i] * diag[i]
            PG = 0.0
            if alpha[i] == 0.0:
                if G > pg_max_old:  # shrink: bound at 0 and likely to stay there
                    active -= 1
                    index[s], index[active] = index[active], index[s]
                    continue
                if G < 0.0:
                    PG = G
            else:
                PG = G
            pg_max = max(pg_max, PG)
            pg_min = min(pg_min, PG)
            if abs(PG) > 1e-12:
                old = alpha[i]
                alpha[i] = max(alpha[i] - G / QD[i], 0.0)
                _axpy(w, bias_at, indptr, indices, data, i, (alpha[i] - old) * y[i])
            s += 1
        it += 1
        if pg_max - pg_min <= eps:
            if active == l:
                break
            active = l  # converged on the active set: check everything once more
            pg_max_old = np.inf
            continue
        pg_max_old = pg_max if pg_max > 0 else np.inf
    return it


@njit()
def _lr_dual(indptr, indices, data, sqnorm, y, Ci, eps, max_iter, state, w):
    """liblinear solve_l2r_lr_dual: α_i + α'_i = C_i, one Newton-solved coordinate at a time."""
    n, bias_at = len(y), len(w) - 1
    alpha = np.zeros(2 * n)
    xTx = np.zeros(n)
    index = np.empty(n, np.int64)
    l = 0
    for i in range(n):
        if Ci[i] > 0:
            alpha[2 * i] = min(0.001 * Ci[i], 1e-8)
            alpha[2 * i + 1] = Ci[i] - alpha[2 * i]
            xTx[i] = sqnorm[i] + 1.0
            _axpy(w, bias_at, indptr, indices, data, i, y[i] * alpha[2 * i])
            index[l] = i
            l += 1
    inner_eps, inner_eps_min, max_inner, eta = 1e-2, min(1e-8, eps), 100, 0.1
    it = 0
    while it < max_iter:
        _shuffle(index, l, state)
        newton_iter, g_max = 0, 0.0
        for s in range(l):
            i = index[s]
            C, a = Ci[i], xTx[i]
            b = y[i] * _dot(w, bias_at, indptr, indices, data, i)
            ind1, ind2, sign = 2 * i, 2 * i + 1, 1.0
            if 0.5 * a * (alpha[ind2] - alpha[ind1]) + b < 0:  # minimise over the smaller of the pair
                ind1, ind2, sign = 2 * i + 1, 2 * i, -1.0
            old = alpha[ind1]
            z = old
            if C - z < 0.5 * C:
                z = 0.1 * z
            gp = a * (z - old) + sign * b + np.log(z / (C - z))
            g_max = max(g_max, abs(gp))
            inner = 0
            while inner <= max_inner:
                if abs(gp) < inner_eps:
                    break
                tmpz = z - gp / (a + C / (C - z) / z)
                z = z * eta if tmpz <= 0 else tmpz
                gp = a * (z - old) + sign * b + np.log(z / (C - z))
                newton_iter += 1
                inner += 1
            if inner > 0:
                alpha[ind1], alpha[ind2] = z, C - z
                _axpy(w, bias_at, indptr, indices, data, i, sign * (z - old) * y[i])
        it += 1
        if g_max < eps:
            break
        if newton_iter <= l // 10:
            inner_eps = max(inner_eps_min, 0.1 * inner_eps)
    return it


@njit()
def solve(indptr, indices, data, sqnorm, y, Ci, loss, eps, max_iter, state, w):
    """Fit one node into `w` (zeroed, length n_cols + 1, the bias last); returns the epochs run."""
    if loss == LOGISTIC:
        return _lr_dual(indptr, indices, data, sqnorm, y, Ci, eps, max_iter, state, w)
    return _l2svc_dual(indptr, indices, data, sqnorm, y, Ci, eps, max_iter, state, w)
