"""Compiled beam search over CompiledLevels: per document, per kept parent, score its chunk and keep the best.

The ranking key is float64(score) + 1e-9·tanh(summed raw margins), as in xtag.models.inference.beam_search, with ties
kept in candidate order (parents best first, children in tree order): the order top_k_positions
documents (its argpartition does not always keep it; see tests/models/engine/test_engine.py).
Arguments are grouped in tuples: A (CompiledLevels.arrays), P (ratio, first level, last level, beam,
k, post-processor id), ws (one thread's buffers, `workspace`), init (a starting beam, or no rows).
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange
from xtag.models.engine.jit import njit
from xtag.models.engine.scoring import dot, offer, post, score_chunk

# A feature-major level is scored whole when the beam keeps at least 1/WHOLE_LEVEL_FACTOR of its parents:
# one row per document feature, streamed, costs less than a cache-missing hash probe per (feature, kept
# parent) even when most of the row is for parents not kept (debdeps level 3, 10 of 32 kept: -15% time).
WHOLE_LEVEL_FACTOR = 8


def workspace(cap, width, n_features, level_nodes):
    """Buffers for one thread: beam (cap), candidates (cap·width), children scores (width), scatter,
    feature-major level scores (level_nodes; kept zero between documents, like the scatter)."""
    cw = cap * width
    return (
        np.empty(cap, np.int64),
        np.empty(cap, np.float32),
        np.empty(cap, np.float64),
        np.empty(cw, np.int64),
        np.empty(cw, np.float32),
        np.empty(cw, np.float64),
        np.empty(cw, np.float64),
        np.empty(cap, np.int64),
        np.empty(width, np.float64),
        np.zeros(n_features, np.float32),
        np.zeros(level_nodes, np.float64),
    )


_workspace = njit()(workspace)


@njit()
def _whole_level(A, t, d_idx, d_val, n_features, lacc):
    """lacc[node] = Σ x_f · w_{node,f} for every node of a feature-major level: one row per document feature."""
    fm_base, fm_ptr, fm_node, fm_w = A[14], A[15], A[16], A[17]
    for i in range(d_idx.size):
        if d_idx[i] < n_features:
            r = fm_base[t] + d_idx[i]
            v = d_val[i]
            for e in range(fm_ptr[r], fm_ptr[r + 1]):
                lacc[fm_node[e]] += np.float64(v * fm_w[e])


@njit()
def _search_doc(A, P, leaf, d_idx, d_val, xd, ws, blen, out_n, out_s, out_m):
    """One document from the beam ws[0:3][:blen] at level t_start-1 down to level t_last.

    Writes the best k nodes (mapped through `leaf` to label ids unless it is empty), their scores and their
    paths' summed raw margins (the tie-break key's input; 0 for padding), which readable scores show.
    """
    ratio, t_start, t_last, beam, k, post_id = P
    bn, bs, bm, cn, cs, cm, ck, sel, acc, scatter, lacc = ws
    chunk_base, node_base, chunk_child0, chunk_nchild, chunk_fptr = A[0], A[1], A[2], A[3], A[4]
    bias, dense, fm_base = A[12], A[13], A[14]
    dims = dense.shape[1]
    nnz = d_idx.size
    mj, mv = np.empty(nnz, np.int64), np.empty(nnz, np.float32)
    for i in range(nnz):
        if d_idx[i] < scatter.size:
            scatter[d_idx[i]] += d_val[i]
    for t in range(t_start, t_last + 1):
        m = k if t == t_last else beam
        nc = np.int64(0)  # not the literal 0: numba would compile `offer` once more for it
        cnt = np.int64(0)
        # Feature-major levels: score the whole level once when the beam keeps enough of its parents.
        whole = fm_base[t] >= 0 and WHOLE_LEVEL_FACTOR * blen >= chunk_base[t + 1] - chunk_base[t]
        if whole:
            _whole_level(A, t, d_idx, d_val, scatter.size, lacc)
        for b in range(blen):
            # Branch and bound (exact): post-processed scores are ≤ 1, so no child scores above its parent;
            # a parent that cannot beat the m-th best key so far is not scored at all.
            if cnt == m and np.float64(bs[b]) + 1e-9 <= ck[sel[m - 1]]:
                continue
            g = chunk_base[t] + bn[b]
            nch = chunk_nchild[g]
            if whole:
                for c in range(nch):
                    acc[c] = lacc[chunk_child0[g] + c]
            else:
                for c in range(nch):
                    acc[c] = 0.0
                use_scatter = chunk_fptr[g + 1] - chunk_fptr[g] <= ratio * nnz
                score_chunk(A, g, d_idx, d_val, scatter, use_scatter, mj, mv, acc)
            for c in range(nch):
                row = node_base[t] + chunk_child0[g] + c
                raw = np.float32(acc[c]) + bias[row]
                if dims > 0:
                    raw = raw + dot(xd, dense, row)
                comb = bs[b] * post(raw, post_id)
                if cnt == m and np.float64(comb) + 1e-9 <= ck[sel[m - 1]]:
                    continue  # cannot enter whatever its tie-break: skip the tanh
                marg = bm[b] + np.float64(raw)
                cn[nc], cs[nc], cm[nc] = chunk_child0[g] + c, comb, marg
                ck[nc] = np.float64(comb) + 1e-9 * math.tanh(marg)
                cnt = offer(ck, nc, cnt, m, sel)
                nc += 1
        if whole:
            lacc[: node_base[t + 1] - node_base[t]] = 0.0
        blen = cnt
        for j in range(blen):
            bn[j], bs[j], bm[j] = cn[sel[j]], cs[sel[j]], cm[sel[j]]
    for i in range(nnz):
        if d_idx[i] < scatter.size:
            scatter[d_idx[i]] = 0
    for j in range(out_n.size):
        out_n[j] = -1 if j >= blen else (leaf[bn[j]] if leaf.size else bn[j])
        out_s[j] = bs[j] if j < blen else -np.inf
        out_m[j] = bm[j] if j < blen else 0.0


@njit()
def search_range(A, P, leaf, indptr, indices, data, Xd, init, lo, hi, ws, out_n, out_s, out_m):
    """Documents lo..hi-1, one after the other, in one workspace; no init rows: start at the root.

    Called from Python for all documents on the calling thread (single requests: no pool, no allocation),
    and by search_parallel for each block.
    """
    init_n, init_s, init_m = init
    bn, bs, bm = ws[0], ws[1], ws[2]
    for i in range(lo, hi):
        blen = 0
        if init_n.shape[0] == 0:
            bn[0], bs[0], bm[0] = 0, 1.0, 0.0
            blen = 1
        else:
            for j in range(init_n.shape[1]):  # a starting beam; padded (-1) entries expand to nothing
                if init_n[i, j] >= 0:
                    bn[blen], bs[blen], bm[blen] = init_n[i, j], init_s[i, j], init_m[i, j]
                    blen += 1
        a, b = indptr[i], indptr[i + 1]
        _search_doc(A, P, leaf, indices[a:b], data[a:b], Xd[i], ws, blen, out_n[i], out_s[i], out_m[i])


@njit(parallel=True)
def search_parallel(A, P, leaf, indptr, indices, data, Xd, init, sizes, blocks, out_n, out_s, out_m):
    """Documents split into `blocks` contiguous ranges run by numba's thread pool, one workspace each
    (sizes: the `workspace` arguments)."""
    n = indptr.size - 1
    for blk in prange(blocks):
        ws = _workspace(sizes[0], sizes[1], sizes[2], sizes[3])
        search_range(
            A,
            P,
            leaf,
            indptr,
            indices,
            data,
            Xd,
            init,
            blk * n // blocks,
            (blk + 1) * n // blocks,
            ws,
            out_n,
            out_s,
            out_m,
        )
