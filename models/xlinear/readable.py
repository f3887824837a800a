"""Readable scores for hinge post-processors: the model's order, without a block of labels at exactly 1.0.

The l3-hinge (and l2-hinge) post-processor maps every ranker score at or above the margin 1 to exactly 1,
so every label whose path clears the margin at each level scores 1.0 and the engine orders them by
their summed raw margins, a key nobody sees (models/engine/kernels.py). The score shown here keeps that
order and makes it visible:

- a path that clears the margin at every level (product == 1.0) scores 1 − BAND / (1 + x), x = max(0,
  Σ_t m_t − depth) the summed raw margins above 1 per level along the path: [1 − BAND, 1), larger margins
  closer to 1, in the engine's tie-break order;
- every other path keeps its product, scaled into [0, 1 − BAND): (1 − BAND) · product.

Both pieces are increasing and meet at 1 − BAND, so the labels come out in exactly the engine's order
(P@k is unchanged) and scores still decrease down the list. Why not a fitted calibration by default:
an honest one needs documents the model did not train on, i.e. a second training run on part of the
split (the cost of a whole `xtag train`) or a smaller training set for the served model (lower P@k);
`xtag calibrate` remains the way to turn these scores into probabilities. Ranking by a non-saturating
post-processor (sigmoid, or l3-hinge × sigmoid) was measured too: it moves P@3/P@5 on debtags (down
0.01-0.5 points), so the engine's ranking stays and only the shown number changes.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from xtag.models.inference.types import Predictions, SplitFeatures

BAND = 0.05  # the top 5 % of the score range: paths that clear every level's margin
HINGES = ("l3-hinge", "l2-hinge")  # the post-processors that saturate (sigmoid does not)
LOOP_MAX_PAIRS = 256


def readable_scores(model, X, preds: Predictions) -> Predictions:
    """`preds` of an XLinearModel (same labels, same order) with the scores described above."""
    if model.config.post_processor not in HINGES or preds.scores.size == 0:
        return preds
    scores = preds.scores.astype(np.float64)
    out = np.where(np.isfinite(scores), (1.0 - BAND) * scores, scores)
    docs, slots = np.nonzero((preds.labels >= 0) & (preds.scores >= np.float32(1.0)))
    if docs.size:
        if preds.margins is not None:  # the engine's own sums: nothing to score again (8 % of a debdeps batch)
            excess = np.maximum(0.0, preds.margins[docs, slots] - model.chain.depth)
        else:  # predictions made without the engine (the numpy reference) or rebuilt since
            excess = path_excess(model, as_csr(X), docs, preds.labels[docs, slots])
        out[docs, slots] = 1.0 - BAND / (1.0 + excess)
        # The engine's key adds 1e-9·tanh(Σ margins), which cannot tell large margins apart (tanh is flat
        # there): it keeps such paths in tree order. Shown as equal, not out of order (1 document in 5910).
        out = np.fmin.accumulate(out, axis=1)
    return Predictions(labels=preds.labels, scores=out.astype(np.float32))


def path_excess(model, X: sp.csr_matrix, docs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """max(0, Σ_t m_t − depth) for each (document, label) pair: how far its path clears the margins.

    The summed raw margin Σ_t m_t is the engine's own tie-break key for equal products
    (models/engine/kernels.py), so among saturated paths these scores fall in exactly the engine's order.
    """
    total = np.zeros(labels.shape)
    for level, ancestors in zip(model.levels, path_nodes(model)):
        total += pair_scores(level.W, level.bias, X, docs, ancestors[labels])
    return np.maximum(0.0, total - model.chain.depth)


def pair_scores(
    W: sp.csr_matrix, bias: np.ndarray, X: sp.csr_matrix, docs: np.ndarray, nodes: np.ndarray
) -> np.ndarray:
    """x_doc · w_node + b_node for each pair, never for whole levels.

    Up to LOOP_MAX_PAIRS pairs (a request, a small batch) each document row is looked up in its node's
    row with searchsorted: building scipy objects cost more than the arithmetic (1.2 ms against 0.1 ms
    for one text on debtags). Beyond, one sparse product of the documents by the nodes involved wins
    (2048 documents: 19 ms against 35 ms).
    """
    if len(docs) > LOOP_MAX_PAIRS:
        ud, d_pos = np.unique(docs, return_inverse=True)
        un, n_pos = np.unique(nodes, return_inverse=True)
        products = (X[ud] @ W[un].T).tocsr()  # kept sparse: documents × nodes can be large on big trees
        return np.asarray(products[d_pos, n_pos], dtype=np.float64).ravel() + bias[un][n_pos]
    out = np.empty(len(docs))
    for i, (d, n) in enumerate(zip(docs.tolist(), nodes.tolist())):
        _, x_val, w_val = shared_features(X, d, W, n)
        out[i] = float(np.dot(w_val.astype(np.float64), x_val))
    return out + bias[nodes]


def shared_features(X: sp.csr_matrix, d: int, W: sp.csr_matrix, node: int) -> tuple[np.ndarray, ...]:
    """The feature columns that document row `d` of X and ranker row `node` of W both hold: (columns, x values,
    w values), in X's column order. Looked up with searchsorted in the node's sorted row, without scipy objects
    (pair_scores' margins and models/explain/linear.py's per-term contributions are both made of these)."""
    if not W.has_sorted_indices:
        W.sort_indices()
    x_idx, x_val = X.indices[X.indptr[d] : X.indptr[d + 1]], X.data[X.indptr[d] : X.indptr[d + 1]]
    w_idx, w_val = W.indices[W.indptr[node] : W.indptr[node + 1]], W.data[W.indptr[node] : W.indptr[node + 1]]
    if not len(w_idx) or not len(x_idx):
        return x_idx[:0], x_val[:0], w_val[:0]
    pos = np.minimum(np.searchsorted(w_idx, x_idx), len(w_idx) - 1)
    hit = w_idx[pos] == x_idx
    return x_idx[hit], x_val[hit], w_val[pos[hit]]


def path_nodes(model) -> list[np.ndarray]:
    """Each level's ancestor of every label, computed once per model (a request needs them for a few labels)."""
    cached = getattr(model, "_readable_ancestors", None)
    if cached is None:
        cached = model._readable_ancestors = [model.chain.ancestors(t) for t in range(1, model.chain.depth + 1)]
    return cached


def as_csr(X) -> sp.csr_matrix:
    """The featuriser's output as one CSR matrix (Φ_cat hands over a sparse and a dense block)."""
    if isinstance(X, SplitFeatures):
        return X.tocsr()
    if not sp.issparse(X):  # CsrArrays: the service's featuriser output
        return sp.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape)
    return X.tocsr()
