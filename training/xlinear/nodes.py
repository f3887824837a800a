"""Compiled plumbing around the solver: a parent's slice of X, and a group of its children trained and pruned."""

from __future__ import annotations

import numpy as np
from xtag.models.engine.jit import njit
from xtag.training.tree.node_kernels import node_state
from xtag.training.xlinear.solver import solve


@njit()
def row_sqnorm(indptr, data):
    n = len(indptr) - 1
    out = np.zeros(n, np.float64)
    for i in range(n):
        for j in range(indptr[i], indptr[i + 1]):
            out[i] += np.float64(data[j]) * data[j]
    return out


@njit()
def _lookup(rows, doc):
    k = np.searchsorted(rows, doc)
    return k if k < len(rows) and rows[k] == doc else -1


@njit()
def train_nodes(
    s_indptr, s_indices, s_data, sqnorm, cols, rows, nodes, y_ptr, y_docs, r_ptr, r_docs, r_vals, has_r, neg_weight,
    pos_weight, loss, C, eps, max_iter, seed, threshold, first_node,
):  # fmt: skip
    """Fit `nodes` (children of the parent whose slice this is) one after another, each from a zero start.

    Targets come from the level's targets in CSC (`y_ptr`, `y_docs`: the documents of each node);
    with `has_r`, relevance in CSC weighs a document's loss by its value, others by `neg_weight`.
    `pos_weight` (one per node of the level, or empty: all 1) multiplies every positive's cost on top:
    the missing-label losses' w⁺c⁺ (liblinear's per-class weight of the positive class).
    Returns the weights pruned below `threshold` as CSR rows over global columns, and the biases. Node `node`
    draws from the stream of node `first_node + node` of its level: a sub-tree's level (a slice of the level's
    nodes, training/xlinear/subtrees.py) seeds its nodes as the whole level does.
    """
    n, n_nodes, n_cols = len(rows), len(nodes), len(cols)
    y = np.empty(n, np.float64)
    Ci = np.empty(n, np.float64)
    w = np.empty(n_cols + 1, np.float64)
    out_ptr = np.zeros(n_nodes + 1, np.int64)
    out_idx = np.empty(max(16, n_cols), np.int32)
    out_val = np.empty(max(16, n_cols), np.float32)
    bias = np.empty(n_nodes, np.float32)
    emit = np.argsort(cols, kind="mergesort")  # local ids in global order: output rows come out sorted
    for t in range(n_nodes):
        node = nodes[t]
        y[:] = -1.0
        n_pos = 0
        for j in range(y_ptr[node], y_ptr[node + 1]):
            k = _lookup(rows, y_docs[j])
            if k >= 0 and y[k] < 0:
                y[k] = 1.0
                n_pos += 1
        Ci[:] = C * (neg_weight if has_r else 1.0)
        if has_r:
            for j in range(r_ptr[node], r_ptr[node + 1]):
                k = _lookup(rows, r_docs[j])
                if k >= 0:
                    Ci[k] = C * r_vals[j]
        if len(pos_weight) > 0 and pos_weight[node] != 1.0:
            for k in range(n):
                if y[k] > 0:
                    Ci[k] *= pos_weight[node]
        out_ptr[t + 1] = out_ptr[t]
        if n_pos == n or n_pos == 0:  # one class only: a constant ranker with a margin-sized bias
            bias[t] = 1.0 if n_pos == n else -1.0
            continue
        w[:] = 0.0
        solve(s_indptr, s_indices, s_data, sqnorm, y, Ci, loss, eps, max_iter, node_state(seed, first_node + node), w)
        bias[t] = w[n_cols]
        kept = 0
        for c in range(n_cols):
            if abs(w[c]) >= threshold:
                kept += 1
        if out_ptr[t] + kept > len(out_idx):
            size = max(2 * len(out_idx), out_ptr[t] + kept)
            grown_idx, grown_val = np.empty(size, np.int32), np.empty(size, np.float32)
            grown_idx[: out_ptr[t]] = out_idx[: out_ptr[t]]
            grown_val[: out_ptr[t]] = out_val[: out_ptr[t]]
            out_idx, out_val = grown_idx, grown_val
        pos = out_ptr[t]
        for c in emit:
            if abs(w[c]) >= threshold:
                out_idx[pos] = cols[c]
                out_val[pos] = w[c]
                pos += 1
        out_ptr[t + 1] = pos
    return out_ptr, out_idx[: out_ptr[n_nodes]].copy(), out_val[: out_ptr[n_nodes]].copy(), bias
