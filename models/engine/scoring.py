"""Scoring pieces of the compiled beam search: post-processors, dense dot, one chunk's children, top-m insert.

Arithmetic follows xtag.models.inference.beam_search where it decides the result: a ranker's raw score is the float32
rounding of a float64 sum of float32 products plus a float32 bias (plus the float32 dense-tail dot
product); post-processed scores are multiplied in float32 along the path.
"""

from __future__ import annotations

import math

import numpy as np
from xtag.models.engine.jit import njit
from xtag.models.engine.layout import HASH_MULTIPLIER

POST_IDS = {"l3-hinge": 0, "l2-hinge": 1, "sigmoid": 2}


@njit()
def post(raw, post_id):
    """POST_PROCESSORS of xtag.models.inference.beam_search, evaluated in float64 and rounded to float32."""
    s = np.float64(raw)
    if post_id == 2:
        return np.float32(1.0 / (1.0 + math.exp(-s)))
    d = max(0.0, np.float64(np.float32(1.0) - raw))
    return np.float32(math.exp(-(d * d * d))) if post_id == 0 else np.float32(math.exp(-(d * d)))


# reassoc lets LLVM vectorise the reduction (BLAS reorders it too); no nnan/ninf, so infinities stay exact.
@njit(fastmath={"reassoc", "contract", "nsz"})
def dot(x, W, row):
    """x · W[row] for the dense tail: per candidate, far fewer products than BLAS over every node."""
    acc = np.float32(0.0)
    for j in range(x.size):
        acc += x[j] * W[row, j]
    return acc


@njit()
def score_chunk(A, g, d_idx, d_val, scatter, use_scatter, mj, mv, acc):
    """acc[child] += Σ x_f · w_{child,f} over chunk g's features present in the document."""
    chunk_fptr, feat_id, feat_eptr, ent_child, ent_w = A[4], A[5], A[6], A[7], A[8]
    f0, f1 = chunk_fptr[g], chunk_fptr[g + 1]
    if use_scatter:  # walk the chunk's features, read the document's value from its dense scatter
        for j in range(f0, f1):
            v = scatter[feat_id[j]]
            if v != 0:
                for e in range(feat_eptr[j], feat_eptr[j + 1]):
                    acc[ent_child[e]] += np.float64(v * ent_w[e])
        return
    chunk_hptr, chunk_hshift, table = A[9], A[10], A[11]
    h0, shift = chunk_hptr[g], chunk_hshift[g]
    mask = chunk_hptr[g + 1] - h0 - 1
    nm = 0
    # Touch every document feature's first slot in a branch-free loop first: those loads (cache misses in
    # big chunks) are independent, so the CPU overlaps them; the probing loop below then mostly hits cache.
    touched = np.int64(0)
    for i in range(d_idx.size):
        touched ^= table[h0 + (((np.int64(d_idx[i]) * HASH_MULTIPLIER) & 0xFFFFFFFF) >> shift)]
    if d_idx.size:
        mj[0] = touched  # keeps the loads (overwritten by the first match below)
    for i in range(d_idx.size):
        f = np.int64(d_idx[i])
        s = ((f * HASH_MULTIPLIER) & 0xFFFFFFFF) >> shift
        while True:
            kv = table[h0 + s]
            if (kv >> 32) == f:
                mj[nm] = f0 + (kv & 0xFFFFFFFF)
                mv[nm] = d_val[i]
                nm += 1
                break
            if kv < 0:
                break
            s = (s + 1) & mask
    for q in range(nm):
        j, v = mj[q], mv[q]
        for e in range(feat_eptr[j], feat_eptr[j + 1]):
            acc[ent_child[e]] += np.float64(v * ent_w[e])


@njit()
def offer(keys, c, cnt, m, sel):
    """Insert candidate c into sel[:cnt], the best (at most m) so far: best first, earlier first on ties."""
    kc = keys[c]
    if cnt == m:
        if not kc > keys[sel[m - 1]]:
            return cnt
        pos = m - 1
    else:
        pos = cnt
        cnt += 1
    while pos > 0 and keys[sel[pos - 1]] < kc:
        sel[pos] = sel[pos - 1]
        pos -= 1
    sel[pos] = c
    return cnt
