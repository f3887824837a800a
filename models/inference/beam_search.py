"""The torch-free inference core: beam search over the label tree with per-level linear rankers.

Training (matcher-aware negatives), evaluation and the service all call `beam_search`; there is
no second copy of this logic anywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from xtag.models.inference.types import (
    FULL_PRODUCT_MAX_NODES,
    CsrArrays,
    FirstLevelSearch,
    PostProcessor,
    Predictions,
    RankerLevel,
    SplitFeatures,
    TreeIndex,
)

# Level-wise scores are mapped into (0, 1] and multiplied along the tree path (as PECOS does).
# l3-hinge (PECOS's default for squared-hinge rankers): exp(-max(0, 1 - s)^3); a score above the
# margin keeps its parent's score intact, one below decays fast.
POST_PROCESSORS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "l3-hinge": lambda s: np.exp(-(np.maximum(0.0, 1.0 - s) ** 3)),
    "l2-hinge": lambda s: np.exp(-(np.maximum(0.0, 1.0 - s) ** 2)),
    "sigmoid": lambda s: 1.0 / (1.0 + np.exp(-s)),
}

# Bound on the dense (documents × candidate nodes) block built per chunk, in entries.
CHUNK_ENTRIES = 4_000_000
# Up to this many documents, whole-level scores are gathered in numpy (see _level_scores_gather).
GATHER_MAX_DOCS = 8


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(start, start + length) for every pair, without a Python loop."""
    total = int(lengths.sum())
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return offsets + np.arange(total)


def _level_scores_gather(X: sp.csr_matrix, level: RankerLevel) -> np.ndarray:
    """Dense n × nodes scores by gathering the weight rows of each document's features.

    Same arithmetic as X @ Wt but without building scipy objects: for a handful of documents the
    object overhead, not the arithmetic, dominates (this path keeps single-document latency low).
    """
    n, K = X.shape[0], level.n_nodes
    Wt = level.Wt
    feats = X.indices
    lengths = Wt.indptr[feats + 1] - Wt.indptr[feats]
    idx = _ranges(Wt.indptr[feats], lengths)
    weights = Wt.data[idx] * np.repeat(X.data, lengths)
    if n == 1:  # the common request: no per-entry document ids needed
        return (np.bincount(Wt.indices[idx], weights=weights, minlength=K).astype(np.float32) + level.bias)[None, :]
    doc_of_entry = np.repeat(np.repeat(np.arange(n), np.diff(X.indptr)), lengths)
    S = np.bincount(doc_of_entry * K + Wt.indices[idx], weights=weights, minlength=n * K)
    return S.reshape(n, K).astype(np.float32) + level.bias[None, :]


def _candidate_scores_gather(X: sp.csr_matrix, level: RankerLevel, cand: np.ndarray) -> np.ndarray:
    """Scores of each document's candidate rows of W, looking features up in the document's sorted indices."""
    W = level.W
    out = np.zeros(cand.shape, dtype=np.float32)
    for i in range(X.shape[0]):  # at most GATHER_MAX_DOCS documents
        valid = cand[i] >= 0
        nodes = cand[i][valid]
        lengths = W.indptr[nodes + 1] - W.indptr[nodes]
        idx = _ranges(W.indptr[nodes], lengths)
        feats = W.indices[idx]
        doc_idx = X.indices[X.indptr[i] : X.indptr[i + 1]]
        doc_val = X.data[X.indptr[i] : X.indptr[i + 1]]
        if len(doc_idx) == 0:
            out[i, valid] = level.bias[nodes]
            continue
        pos = np.minimum(np.searchsorted(doc_idx, feats), len(doc_idx) - 1)
        contrib = np.where(doc_idx[pos] == feats, W.data[idx] * doc_val[pos], 0.0)
        seg = np.repeat(np.arange(len(nodes)), lengths)
        out[i, valid] = np.bincount(seg, weights=contrib, minlength=len(nodes)) + level.bias[nodes]
    return out


def _split_dense(X: sp.csr_matrix, start: int) -> tuple[sp.csr_matrix | CsrArrays, np.ndarray]:
    """(X without the columns ≥ start, same shape; those columns as a dense n × (d - start) array).

    The first part is plain arrays (CsrArrays) for at most GATHER_MAX_DOCS rows, where only the
    gather paths read it, and a scipy matrix otherwise.
    """
    n = X.shape[0]
    tail = X.indices >= start
    rows = np.repeat(np.arange(n), np.diff(X.indptr))
    dense = np.zeros((n, X.shape[1] - start), dtype=np.float32)
    dense[rows[tail], X.indices[tail] - start] = X.data[tail]
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows[~tail], minlength=n))))
    if n <= GATHER_MAX_DOCS:
        return CsrArrays(X.data[~tail], X.indices[~tail], indptr, X.shape), dense
    return sp.csr_matrix((X.data[~tail], X.indices[~tail], indptr), shape=X.shape), dense


def score_candidates(X: sp.csr_matrix | SplitFeatures, level: RankerLevel, cand: np.ndarray) -> np.ndarray:
    """Raw ranker scores for (document, candidate node) pairs; `cand` is n × m with -1 padding.

    Levels with a dense tail score SplitFeatures whose split matches theirs as they are (beam
    search splits a CSR input once for all levels); any other input is split or joined here.
    """
    if isinstance(X, SplitFeatures) and (level.dense_start is None or level.dense_start != X.start):
        X = X.tocsr()
    if level.dense_start is None:
        return _score_sparse(X, level, cand)
    Xs, Xd = (X.sparse, X.dense) if isinstance(X, SplitFeatures) else _split_dense(X, level.dense_start)
    n = cand.shape[0]
    if level.n_nodes <= FULL_PRODUCT_MAX_NODES and n <= GATHER_MAX_DOCS:  # whole level, both blocks, one lookup
        S = _level_scores_gather(Xs, level)
        S += Xd @ level.dense.T
        return S[np.arange(n)[:, None], np.maximum(cand, 0)]
    out = _score_sparse(Xs, level, cand)  # Xs has nothing in the dense columns: they add no work there
    c = np.maximum(cand, 0)
    chunk = max(
        1,
        CHUNK_ENTRIES
        // max(level.n_nodes if level.n_nodes <= FULL_PRODUCT_MAX_NODES else cand.shape[1] * Xd.shape[1], 1),
    )
    for lo in range(0, X.shape[0], chunk):
        if level.n_nodes <= FULL_PRODUCT_MAX_NODES:
            out[lo : lo + chunk] += np.take_along_axis(Xd[lo : lo + chunk] @ level.dense.T, c[lo : lo + chunk], axis=1)
        else:
            out[lo : lo + chunk] += np.einsum("nd,nmd->nm", Xd[lo : lo + chunk], level.dense[c[lo : lo + chunk]])
    return out


def _score_sparse(X: sp.csr_matrix, level: RankerLevel, cand: np.ndarray) -> np.ndarray:
    """score_candidates through the sparse paths only (whole-level product or candidate rows)."""
    n, m = cand.shape
    out = np.zeros((n, m), dtype=np.float32)
    if level.n_nodes <= FULL_PRODUCT_MAX_NODES:
        if n <= GATHER_MAX_DOCS:
            return _level_scores_gather(X, level)[np.arange(n)[:, None], np.maximum(cand, 0)]
        chunk = max(1, CHUNK_ENTRIES // max(level.n_nodes, 1))
        for lo in range(0, n, chunk):
            S = (X[lo : lo + chunk] @ level.Wt).toarray()
            S += level.bias[None, :]
            c = cand[lo : lo + chunk]
            out[lo : lo + chunk] = np.take_along_axis(S, np.maximum(c, 0), axis=1)
        return out
    if n <= GATHER_MAX_DOCS:
        return _candidate_scores_gather(X, level, cand)
    chunk = max(1, int(np.sqrt(CHUNK_ENTRIES / max(m, 1))))
    for lo in range(0, n, chunk):
        c = cand[lo : lo + chunk]
        uniq, pos = np.unique(np.maximum(c, 0), return_inverse=True)
        S = (X[lo : lo + chunk] @ level.W[uniq].T).toarray()
        S += level.bias[uniq][None, :]
        out[lo : lo + chunk] = np.take_along_axis(S, pos.reshape(c.shape), axis=1)
    return out


def top_k_positions(key: np.ndarray, k: int) -> np.ndarray:
    """Column positions of the (at most) k largest entries per row, best first; ties keep column order."""
    n, m = key.shape
    rows = np.arange(n)[:, None]
    part = np.argpartition(-key, k - 1, axis=1)[:, :k] if m > k else np.broadcast_to(np.arange(m), (n, m))
    return part[rows, np.argsort(-key[rows, part], axis=1, kind="stable")]


def _pad(a: np.ndarray, k: int, fill) -> np.ndarray:
    if a.shape[1] >= k:
        return a
    out = np.full((a.shape[0], k), fill, dtype=a.dtype)
    out[:, : a.shape[1]] = a
    return out


def top_k(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best k (id, score) per row, best first; -inf scores come back as id -1, missing ones padded."""
    pos = top_k_positions(scores, k)
    rows = np.arange(scores.shape[0])[:, None]
    scores, ids = scores[rows, pos], ids[rows, pos]
    ids = np.where(np.isfinite(scores), ids, -1)
    return _pad(ids, k, -1), _pad(scores, k, -np.inf)


def beam_search(
    X: sp.csr_matrix | SplitFeatures,
    levels: list[RankerLevel],
    tree: TreeIndex,
    beam_size: int,
    k: int,
    post_processor: PostProcessor = "l3-hinge",
    stop_level: int | None = None,
    first_level: FirstLevelSearch | None = None,
) -> Predictions:
    """Walk the tree top-down keeping the `beam_size` best nodes per document; return the top k labels.

    With `stop_level` set, stops after that level and returns its best `k` nodes (node ids, not
    labels): the trainer uses this for matcher-aware negatives. With `first_level`, level 1's
    candidates and raw scores come from that search (an index) instead of scoring every node; an
    exact index gives the same result because post-processors are increasing.
    """
    post = POST_PROCESSORS[post_processor]
    n = X.shape[0]
    starts = {level.dense_start for level in levels if level.dense_start is not None}
    if isinstance(X, SplitFeatures) and starts != {X.start}:
        X = X.tocsr()  # blocks that do not match the rankers' dense tail: score as one matrix
    if not isinstance(X, SplitFeatures):
        if not (sp.isspmatrix_csr(X) and X.dtype == np.float32):
            X = sp.csr_matrix(X, dtype=np.float32)
        if not X.has_sorted_indices:  # the candidate gather looks features up by binary search
            X = X.sorted_indices()
    joined = None if isinstance(X, SplitFeatures) else X  # what a first-level index is queried with
    if joined is not None and len(starts) == 1:  # Φ_cat: split once here, not once per level
        start = starts.pop()
        X = SplitFeatures(*_split_dense(joined, start), start)
    nodes = np.zeros((n, 1), dtype=np.int64)
    scores = np.ones((n, 1), dtype=np.float32)
    margins = np.zeros((n, 1))  # summed raw scores along each path, to break ties (see below)
    rows = np.arange(n)[:, None]
    last = stop_level or len(levels)
    for t in range(1, last + 1):
        if t == 1 and first_level is not None:
            cand, raw = first_level.search(X.tocsr() if joined is None else joined, k if t == last else beam_size)
            parent, parent_margin = np.ones(cand.shape, dtype=np.float32), np.zeros(cand.shape)
        else:
            table = tree.tables[t - 1]
            width = table.shape[1]
            cand = table[nodes].reshape(n, -1)
            parent, parent_margin = np.repeat(scores, width, axis=1), np.repeat(margins, width, axis=1)
            raw = score_candidates(X, levels[t - 1], cand)
        with np.errstate(invalid="ignore"):  # padded slots (-inf parent × 0) are masked right here
            combined = np.where(cand >= 0, parent * post(raw), -np.inf).astype(np.float32)
        path_margin = parent_margin + raw
        # l3-hinge saturates at 1 for margins >= 1, so confident candidates tie exactly; the summed raw
        # margin breaks such ties (the 1e-9 nudge is below float32 resolution of the scores themselves).
        key = combined.astype(np.float64) + 1e-9 * np.tanh(path_margin)
        pos = top_k_positions(key, k if t == last else beam_size)
        nodes, scores, margins = cand[rows, pos], combined[rows, pos], path_margin[rows, pos]
        nodes = np.where(np.isfinite(scores), nodes, -1)
    nodes, scores = _pad(nodes, k, -1), _pad(scores, k, -np.inf)
    if stop_level is not None:
        return Predictions(labels=nodes, scores=scores)
    labels = np.where(nodes >= 0, tree.chain.leaf_labels[np.maximum(nodes, 0)], -1)
    return Predictions(labels=labels, scores=scores)
